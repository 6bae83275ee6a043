"""The ranks of a torchrun job, and their checks merged into one report on rank 0.

Each rank records its own trace (``meta["rank"]``); ``gather_on_rank0`` sends
them to rank 0 over the job's key-value store, not over a collective: the
case rule 12 is about is the one where the ranks' collectives no longer pair
up, and a gather issued then would pair with a stray all-reduce. Rank 0 runs
``simlib.checker.check_ranks`` and every rank gets the verdict back the same
way, so all ranks raise or none does.

``ranks_checked()`` is ``capture_checked()`` for a job: every capture inside
the block, on every rank, checked alone and across the ranks when the block
ends.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist

from gpu_demo.guard.no_capture import no_capture
from gpu_demo.guard.record.cuda_device import Device
from gpu_demo.guard.record.recorder import CaptureRecorder
from simlib.checker import ERROR, RankFinding, check_ranks, format_rank_report
from simlib.trace import Capture, Trace

STORE_PREFIX = "capture_order"
GATHER_TIMEOUT_S = 300.0
_exchanges: Counter[str] = Counter()   # exchanges of each name so far: every rank counts alike


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the job's size: the default group's, else torchrun's environment."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def gather_on_rank0(name: str, payload: str, timeout_s: float = GATHER_TIMEOUT_S) -> list[str] | None:
    """Every rank's ``payload`` on rank 0, in rank order (``None`` on the other ranks).

    Every rank must make the same exchanges in the same order; the n-th exchange of a ``name``
    has keys of its own. Needs the default process group (its store).
    """
    if not dist.is_initialized():
        raise RuntimeError("gathering the ranks' traces needs torch.distributed initialised "
                           "(dist.init_process_group) on every rank; call it before the check")
    rank, world = rank_and_world()
    store, key = dist.distributed_c10d._get_default_store(), _key(name)
    store.set(f"{key}/{rank}", payload)
    if rank != 0:
        return None
    keys = [f"{key}/{r}" for r in range(world)]
    store.wait(keys, timedelta(seconds=timeout_s))
    return [store.get(k).decode() for k in keys]


def share_from_rank0(name: str, payload: str | None, timeout_s: float = GATHER_TIMEOUT_S) -> str:
    """Rank 0's ``payload`` on every rank."""
    store, key = dist.distributed_c10d._get_default_store(), f"{_key(name)}/from0"
    if rank_and_world()[0] == 0:
        store.set(key, payload or "")
    store.wait([key], timedelta(seconds=timeout_s))
    return store.get(key).decode()


def _key(name: str) -> str:
    """The store key of this exchange of ``name``: the n-th exchange of a name gets its own keys."""
    _exchanges[name] += 1
    return f"{STORE_PREFIX}/{name}/{_exchanges[name]}"


def merged_check(traces: Sequence[Trace]) -> tuple[list[RankFinding], str]:
    """``check_ranks`` over the ranks' traces and the merged report."""
    found = check_ranks(traces)
    captured = any(type(r) is Capture for t in traces for r in t.records)
    return found, format_rank_report(found, sorted(t.meta["rank"] for t in traces),
                                     None if captured else no_capture("on any rank"), sites=True)


def check_job(trace: Trace, name: str) -> dict[str, Any]:
    """Check this rank's ``trace`` with every other rank's (the same ``name`` on every rank).

    Returns, on every rank, ``{"findings": [...], "report": text, "clean": bool}`` as rank 0 made it.
    """
    texts = gather_on_rank0(name, trace.to_json())
    verdict = None
    if texts is not None:
        found, report = merged_check([Trace.from_json(t) for t in texts])
        verdict = json.dumps({"findings": [f.to_dict() for f in found], "report": report,
                              "clean": not any(f.finding.severity == ERROR for f in found)})
    return json.loads(share_from_rank0(name, verdict))


@contextmanager
def ranks_checked(*, strict: bool = False, on_hazard: str = "raise", name: str = "ranks_checked",
                  device: Device | None = None) -> Iterator[CaptureRecorder]:
    """Record the block on every rank; at its end check each rank and the ranks together.

    Every rank must enter the block; one whose block raises still sends its trace (the error
    goes on, with the merged report as a note). A hazard on any rank raises ``AssertionError``
    with the merged report on every rank (``on_hazard="warn"``: rank 0 prints it); ``strict``
    counts warnings too.
    """
    if on_hazard not in ("raise", "warn"):
        raise ValueError(f"on_hazard={on_hazard!r} is not one of 'raise', 'warn'")
    rank, world = rank_and_world()
    recorder = CaptureRecorder({"recorder": "gpu_demo.distributed", "torch": torch.__version__,
                                "rank": rank, "world_size": world}, device=device)
    try:
        with recorder:
            yield recorder
    except BaseException as exc:
        exc.add_note(check_job(recorder.trace, name)["report"])
        raise
    verdict = check_job(recorder.trace, name)
    failed = verdict["findings"] if strict else [f for f in verdict["findings"] if f["severity"] == ERROR]
    if failed and on_hazard == "raise":
        raise AssertionError(verdict["report"])
    if failed and rank == 0:
        print(verdict["report"])
