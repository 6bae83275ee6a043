"""Two gloo processes on the CPU, started by torchrun: the TP demo's dry recording and the whole-job check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from simlib.glossary import NO_CAPTURE_SEEN

REPO = Path(__file__).resolve().parents[4]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
SMALL = ["--dtype", "float32", "--tokens", "4", "--hidden", "32", "--intermediate", "48", "--experts", "4"]


def torchrun(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*TORCHRUN, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", **(env or {})})


def test_two_gloo_ranks_record_the_tp_demo_and_rank_0_merges_the_verdicts(tmp_path):
    """One torchrun job (about 10 s): every case on both ranks, each verdict made by rank 0."""
    out = tmp_path / "tp-cpu-x2.json"
    done = torchrun("-m", "gpu_demo.distributed", "run", "--tp", "2", "--device", "cpu", *SMALL,
                    "--collective-timeout-s", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [r["rank"] for r in results["ranks"]] == [0, 1]

    def verdict(case):
        first, second = (r["cases"][case]["guard"] for r in results["ranks"])
        assert (first["clean"], first["rules"]) == (second["clean"], second["rules"])   # one verdict, rank 0's
        assert first["report"] and second["report"] is None
        return first

    incident = verdict("routed_first")
    assert {("0", "host_mutation"), ("1", "host_mutation")} <= {tuple(r) for r in incident["rules"]}
    for case in ("shared_first", "fix:skip_in_capture", "fix:own_buffer", "fix:clone", "fix:empty_shard_joins"):
        assert verdict(case)["clean"], case
    divergent = verdict("empty_shard_skips_all_reduce")
    assert ["0,1", "collective_mismatch"] in divergent["rules"]
    assert "rank 1: nothing" in " ".join(divergent["report"].split())
    for rank in results["ranks"]:   # the sharded stack computes the full one, eagerly, on each rank
        assert all(case["eager_error"] < rank["tolerance"] for case in rank["cases"].values()), rank
    provenance, job = results["provenance"], results["job"]
    assert (job["backend"], job["world_size"], job["mode"]) == ("gloo", 2, "dry_run")
    assert provenance["torch"] and provenance["date_utc"] and provenance["gpu"] is None
    assert provenance["command"].startswith("torchrun --nproc-per-node 2 -m gpu_demo.distributed run --tp 2")


PROGRAM = textwrap.dedent('''
    import os, torch, torch.distributed as dist
    from gpu_demo.guard.process import process_checker
    from gpu_demo.guard.record.dry_run import dry_capture

    dist.init_process_group("gloo")
    x = torch.ones(8)
    with process_checker().recorder.capturing([x]), dry_capture():
        y = x * 2
        if dist.get_rank() == 0 or os.environ.get("FIXED"):   # the hazard: rank 1 leaves it out
            dist.all_reduce(y)
    dist.destroy_process_group()
''')


@pytest.mark.parametrize("fixed", [False, True])
def test_the_whole_job_check_merges_the_ranks_on_rank_0(tmp_path, fixed):
    (tmp_path / "job.py").write_text(PROGRAM)
    report = tmp_path / "report.txt"
    done = torchrun("-m", "gpu_demo.distributed", "check", str(tmp_path / "job.py"),
                    env={"CAPTURE_ORDER_REPORT": str(report), **({"FIXED": "1"} if fixed else {})})
    text = " ".join(report.read_text().split())
    assert text.startswith("capture-order check of 2 ranks (0, 1):")
    if fixed:
        assert done.returncode == 0, done.stderr[-3000:]
        assert "No capture hazards found on any rank" in text
    else:   # rank 1 leaves, so rank 0's all-reduce fails; the merge still comes
        assert "[ranks 0, 1] ERROR rule 12 (collective_mismatch)" in text and "rank 1: nothing" in text
        assert done.returncode != 0
        assert "rank 0: capture of graph 0 (capture-order check)" in done.stderr   # each rank's own warning


NOTHING_CAPTURED = textwrap.dedent('''
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    x = torch.ones(4)
    dist.all_reduce(x)
    dist.destroy_process_group()
''')


def test_a_job_that_captured_nothing_says_so_instead_of_an_all_clear(tmp_path):
    (tmp_path / "job.py").write_text(NOTHING_CAPTURED)
    report = tmp_path / "report.txt"
    done = torchrun("-m", "gpu_demo.distributed", "check", str(tmp_path / "job.py"), env={"CAPTURE_ORDER_REPORT": str(report)})
    assert done.returncode == 0, done.stderr[-3000:]
    title, said = report.read_text().splitlines()
    assert title == "capture-order check of 2 ranks (0, 1):"
    assert said.startswith(f"capture-order check: {NO_CAPTURE_SEEN} on any rank: there is no CUDA device here")


RANKS_CHECKED = textwrap.dedent('''
    import sys
    import torch, torch.distributed as dist
    from gpu_demo.guard.job.ranks import ranks_checked
    from gpu_demo.guard.record.dry_run import dry_capture

    dist.init_process_group("gloo")
    x = torch.ones(8)
    with ranks_checked() as recorder, recorder.capturing([x]), dry_capture():   # clean: a first exchange
        dist.all_reduce(x)
    try:
        with ranks_checked() as recorder, recorder.capturing([x]), dry_capture():
            y = x * 2
            if dist.get_rank() == 1:
                y.set_(torch.empty(0))        # the hazard, on rank 1 only
            dist.all_reduce(x)
            z = y + 1
    except AssertionError as exc:   # a file per rank: two ranks' long lines interleave on one stdout pipe
        with open(f"{sys.argv[1]}/raised{dist.get_rank()}.txt", "w") as f:
            f.write(f"RAISED on rank {dist.get_rank()}: " + " ".join(str(exc).split()))
    dist.destroy_process_group()
''')


def test_ranks_checked_raises_on_every_rank_with_the_report_that_names_the_rank(tmp_path):
    """Two blocks: the first is clean, so a verdict read from the first exchange would not raise."""
    (tmp_path / "job.py").write_text(RANKS_CHECKED)
    done = torchrun(str(tmp_path / "job.py"), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    raised = sorted(path.read_text() for path in tmp_path.glob("raised*.txt"))
    assert [line.split(":")[0] for line in raised] == ["RAISED on rank 0", "RAISED on rank 1"]
    assert all("[rank 1] ERROR rule 1 (host_mutation)" in line and "[rank 0]" not in line for line in raised)
