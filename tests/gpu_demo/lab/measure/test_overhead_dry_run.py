"""The recorder's cost per op, as a dry run (no timings asserted)."""

from __future__ import annotations

import torch
from small_moe import no_cuda

from gpu_demo.lab.cli.main import main


@no_cuda
def test_the_dry_run_overhead_counts_ops_and_prices_them_against_an_empty_dispatch_mode(capsys, tmp_path):
    import json

    out, threads = tmp_path / "overhead.json", torch.get_num_threads()
    assert main(["recorder-overhead", "--dry-run", "--layers", "1", "--repeats", "1", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "floor us/op" in table and "moe_stack" in table and "plain_pytorch_stack" in table
    written = json.loads(out.read_text())
    assert written["provenance"]["command"].startswith("python -m gpu_demo recorder-overhead --dry-run")
    assert (written["mode"], written["intra_op_threads"], written["clock"]) == ("dry_run", 1, "process_time")
    for stack in ("moe_stack", "plain_pytorch_stack"):
        result = written[stack]
        assert result["ops"] > 0 and result["records"] >= result["ops"] // 2
        assert {"plain_s", "floor_s", "record_s", "check_s", "floor_us_per_op", "record_us_per_op"} <= set(result)
        assert len(result["floor_s"]["samples"]) == 1
    assert torch.get_num_threads() == threads
