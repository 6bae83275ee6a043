"""The whole-process check of a torchrun job, with one merged report on rank 0.

``CAPTURE_ORDER_CHECK=1 torchrun ... your_script.py`` already checks every
capture on every rank (``gpu_demo.guard.process``): each rank warns about its
own captures. What no rank can see alone is whether the ranks captured the
same collectives. ``torchrun ... -m gpu_demo.distributed check your_script.py``
runs the script under the same whole-process check and, besides, keeps each
capture's collectives (a few records per graph: the checker forgets the rest);
when the script calls ``dist.destroy_process_group()``, or ends with the group
still up, every rank sends its findings and collectives to rank 0 over the
store, and rank 0 prints the merged report (rule 12 included) to stderr and
writes it to ``CAPTURE_ORDER_REPORT`` if that is set. A script that fails
(a peer's collective no longer pairs up: gloo aborts, a timeout) still gets
the merge, since the store is not the group's collectives.
"""

from __future__ import annotations

import functools
import json
import os
import runpy
import sys
from typing import Any, Callable, Sequence

import torch.distributed as dist

from gpu_demo.guard.job.ranks import gather_on_rank0, rank_and_world
from gpu_demo.guard.no_capture import no_capture
from gpu_demo.guard.process import CaptureChecker, check_process
from simlib.checker import RankFinding, format_rank_report
from simlib.checker.findings import Finding
from simlib.checker.rule_cross_rank import COLLECTIVE_PREFIX, collective_mismatches
from simlib.trace import Capture, Launch, Record, SkippedLaunch, Trace

REPORT_ENV = "CAPTURE_ORDER_REPORT"


class JobCheck:
    """A rank's whole-process checker plus what rule 12 needs of each capture: its collectives."""

    def __init__(self, checker: CaptureChecker) -> None:
        self.checker = checker
        self.kept: list[Record] = []
        self.report: str | None = None   # rank 0's merged report, once made
        self._merged = False
        checker.recorder.capture_ended.insert(0, self._keep)   # before the checker forgets the capture

    def _keep(self, graph: int) -> None:
        for r in self.checker.recorder.snapshot(graph).records:
            collective = type(r) in (Launch, SkippedLaunch) and r.kernel.startswith(COLLECTIVE_PREFIX)
            if (type(r) is Capture or collective) and r.graph == graph:
                self.kept.append(r)

    def merge(self) -> str | None:
        """Rank 0's merged report of the job (``None`` on the other ranks); once per process."""
        if self._merged:
            return self.report
        self._merged = True
        rank, world = rank_and_world()
        mine = {"rank": rank, "collectives": Trace(self.kept, {"rank": rank}).to_dict(),
                "findings": [f.to_dict() for report in self.checker.reports for f in report.findings],
                "captures": self.checker.captures}
        texts = gather_on_rank0("whole_job", json.dumps(mine))
        if texts is None:
            return None
        ranks = [json.loads(t) for t in texts]
        found = [RankFinding((r["rank"],), _finding(f)) for r in ranks for f in r["findings"]]
        found += [RankFinding(tuple(range(world)), f)
                  for f in collective_mismatches([Trace.from_dict(r["collectives"]) for r in ranks])]
        captured = sum(r["captures"] for r in ranks)
        self.report = format_rank_report(found, list(range(world)), None if captured else no_capture("on any rank"),
                                         sites=True)
        print(self.report, file=sys.stderr)
        if os.environ.get(REPORT_ENV):
            with open(os.environ[REPORT_ENV], "w") as out:
                out.write(self.report + "\n")
        return self.report


def _finding(data: dict[str, Any]) -> Finding:
    return Finding(**{**data, "pointers": tuple(int(p, 16) for p in data["pointers"])})


def check_job_process(on_hazard: str = "warn") -> JobCheck:
    """Whole-process checking on this rank, merged on rank 0 before the group goes away."""
    job = JobCheck(check_process(on_hazard))
    dist.destroy_process_group = _merging_first(dist.destroy_process_group, job)
    return job


def _merging_first(destroy: Callable[..., Any], job: JobCheck) -> Callable[..., Any]:
    @functools.wraps(destroy)
    def destroy_process_group(group: Any = None) -> Any:
        if group is None and dist.is_initialized():
            job.merge()
        return destroy(group)
    return destroy_process_group


def main(argv: Sequence[str], on_hazard: str = "warn") -> int:
    """Run ``script.py args`` or ``-m module args`` with every rank's captures checked and merged."""
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        print("usage: torchrun ... -m gpu_demo.distributed check (script.py | -m module) [args...]",
              file=sys.stderr)
        return 2
    job = check_job_process(on_hazard)
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    finally:   # a job whose collectives no longer pair up fails; the store still carries the merge
        if dist.is_initialized():
            job.merge()
    return 0
