"""The committed one-H200 run of the TP MoE, and what docs/results.md says of it."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
RESULTS = json.loads((ROOT / "gpu_demo" / "lab" / "results" / "tp-h200x1.json").read_text())


def test_the_one_gpu_run_kept_the_incidents_outcomes_and_the_results_page_quotes_it():
    assert RESULTS["job"] == {**RESULTS["job"], "backend": "nccl", "world_size": 1}
    assert RESULTS["provenance"]["gpu"] == "NVIDIA H200"
    (rank,) = RESULTS["ranks"]
    cases = rank["cases"]
    assert cases["routed_first"]["truth"]["outcome"] == "silent_wrong"
    assert cases["shared_first"]["truth"]["outcome"] == "correct"
    assert [code for _, code in cases["shared_first"]["guard"]["rules"]] == ["reuse_after_free"]
    for fix in ("fix:clone", "fix:own_buffer", "fix:skip_in_capture"):
        assert cases[fix]["truth"]["outcome"] == "correct" and cases[fix]["guard"]["rules"] == []
    latency = rank["latency_us"]
    readme = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert (f"A replay took {latency['with_all_reduce']:.1f} µs with the all-reduce and "
            f"{latency['without_all_reduce']:.1f} µs without it") in readme
