"""Rule 9, ``input_rebuilt``: an input the program copies from the host into a fresh tensor every call."""

from __future__ import annotations

from typing import Iterator

from ..trace import Arg, Launch, TensorId
from .calls import CAPTURE, CallRecord, earlier_eager_calls
from .findings import Finding, plural
from .index import Index
from .rules import INPUT_REBUILT

H2D = "h2d"


def rebuilt_inputs(calls: list[CallRecord], index: Index) -> Iterator[Finding]:
    """Captured reads of a tensor the capture's call copied from the host, where two or more
    earlier calls read a different tensor at that position, each copied from the host in its call."""
    for capture in (c for c in calls if c.phase == CAPTURE):
        earlier = earlier_eager_calls(calls, capture)
        if len(earlier) < 2:
            continue
        found: dict[TensorId, list[tuple[Launch, Arg, Launch, list[CallRecord]]]] = {}
        for key, node in capture.keyed().items():
            if node.graph is None or index.graph(node.graph).failed:
                continue
            for k, arg in enumerate(node.args):
                writer = _h2d_writer(capture, node, arg) if arg.reads else None
                if writer is None:
                    continue
                rebuilt = [(c, a) for c in earlier if (launch := c.keyed().get(key)) is not None
                           and k < len(launch.args) and (a := launch.args[k]).reads
                           and _h2d_writer(c, launch, a) is not None]
                tensors = {a.tensor for _, a in rebuilt} | {arg.tensor}
                if len(rebuilt) >= 2 and len(tensors) == len(rebuilt) + 1:
                    found.setdefault(arg.tensor, []).append((node, arg, writer, [c for c, _ in rebuilt]))
        for hits in found.values():
            yield _finding(hits)


def _h2d_writer(call: CallRecord, reader: Launch, arg: Arg) -> Launch | None:
    """The last host-to-device copy of ``call`` before ``reader`` that wrote bytes ``arg`` reads."""
    lo, hi = arg.ptr, arg.ptr + (arg.nbytes or 1)
    writer = None
    for launch in call.of_role(H2D):
        if launch.step >= reader.step:
            break
        if any(a.writes and a.ptr < hi and lo < a.ptr + (a.nbytes or 1) for a in launch.args):
            writer = launch
    return writer


def _finding(hits: list[tuple[Launch, Arg, Launch, list[CallRecord]]]) -> Finding:
    node, arg, writer, earlier = hits[0]
    more = f" ({plural(len(hits) - 1, 'more captured read')} of it too)" if len(hits) > 1 else ""
    copy = "captured as a node that re-reads the host buffer of the capture" if writer.graph is not None \
        else "made before the capture began"
    return INPUT_REBUILT.finding(
        node.step, arg.label, (arg.ptr,),
        f"{node.label!r} on {node.stream} at step {node.step} reads {arg.label!r} at {hex(arg.ptr)}, "
        f"which the host copied from host memory in the capture's call ({writer.label!r} at step "
        f"{writer.step}, {copy}){more}. In the {plural(len(earlier), 'earlier call')} that launch "
        f"read a different tensor each time, each copied from the host in its own call: the program "
        f"rebuilds this input every call. The graph keeps the capture's tensor and its copy source, "
        f"so every replay reads the capture's value, not the new one.",
        "Copy the new data into one static buffer before each replay (static.copy_(new, "
        "non_blocking=True) outside the graph) and let the captured code read that buffer, "
        "instead of building a fresh tensor from host data inside the captured call.")
