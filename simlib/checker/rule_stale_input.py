"""Rule 5, ``stale_input``: a replay ran with no eager write into a static input since the last."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from ..trace import Arg, Capture, DataPtr, GraphId, Launch, Replay, Trace
from .findings import ERROR, Finding
from .index import Index


def stale_inputs(trace: Trace, index: Index) -> Iterator[Finding]:
    """Replays with no eager write into a static input since the last capture end or replay."""
    watched: dict[GraphId, dict[DataPtr, tuple[int, bool]]] = {}  # ptr -> (extent, refreshed)
    stale: dict[tuple[GraphId, DataPtr], list[Replay]] = {}
    replays: dict[GraphId, int] = defaultdict(int)
    for r in trace.records:
        kind = type(r)
        if kind is Launch and r.graph is None and watched:
            for arg in r.args:
                if arg.writes:
                    _mark_refreshed(watched, arg)
        elif kind is Capture and r.op == "end" and r.error is None and r.inputs:
            extents = index.graph(r.graph).input_extents(r.inputs)
            watched[r.graph] = {p: (extents[p], False) for p in r.inputs}
        elif kind is Replay and r.graph in watched:
            replays[r.graph] += 1
            inputs = watched[r.graph]
            for p, (extent, refreshed) in inputs.items():
                if not refreshed:
                    stale.setdefault((r.graph, p), []).append(r)
                inputs[p] = (extent, False)
    for (gid, p), found in stale.items():
        first = found[0]
        label = index.graph(gid).input_label(p)
        yield Finding(
            5, "stale_input", ERROR, first.step, label, (p,),
            f"graph {gid} reads its static input {label!r} at {hex(p)}, but {len(found)} of its "
            f"{replays[gid]} replays (first at step {first.step}, replay #{first.index}) ran with "
            f"no eager write into it since the capture ended or the previous replay: they "
            f"computed on an old input, not a new one.",
            f"Copy every new input into the captured buffer before each replay "
            f"({label}.copy_(new_input)); the graph never sees a new tensor. Check replays with "
            f"fresh inputs: reusing the warm-up input hides this bug.")


def _mark_refreshed(watched: dict[GraphId, dict[DataPtr, tuple[int, bool]]], arg: Arg) -> None:
    lo, hi = arg.ptr, arg.ptr + arg.nbytes
    for inputs in watched.values():
        for p, (extent, refreshed) in inputs.items():
            if not refreshed and lo < p + extent and p < hi:
                inputs[p] = (extent, True)
