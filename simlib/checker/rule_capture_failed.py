"""Rule 0, ``capture_failed``: a capture ended with an error, so there is no graph."""

from __future__ import annotations

import re

from ..glossary import GRAPH_HOLDS, SHAPE_ERROR, capture_error, term
from .findings import Finding
from .index import Graph
from .rules import CAPTURE_FAILED

_CUDA_ERROR = re.compile(r"\b(cudaError[A-Za-z]+)\b")
# error -> (what it means, how to fix it); others get the glossary's meaning
_CAPTURE_ERRORS: dict[str, tuple[str, str]] = {
    "cudaErrorStreamCaptureUnsupported": (
        "an operation that is not permitted while a stream is capturing ran: a device or stream "
        "synchronize, .item() or another host read of a device value, or a pageable copy",
        "Move the sync or host read out of the captured region (before or after it), or keep the "
        "value on the device."),
    "cudaErrorStreamCaptureInvalidated": (
        "an earlier operation not permitted while capturing (a sync, a host read of a device value, "
        "work on a stream that never waited on the capture) invalidated it, and later captured "
        "calls failed too",
        "Find the first error of the capture (the earliest in the exception chain) and fix that one."),
    "cudaErrorStreamCaptureUnjoined": (
        "a stream forked from the capturing stream still had work when the capture ended",
        "Join every forked stream back before the capture ends: main.wait_stream(alt) after the "
        "last launch on alt."),
    "cudaErrorStreamCaptureIsolation": (
        "a capturing stream waited on an event recorded outside the capture: a graph cannot "
        "depend on uncaptured work",
        "Wait on that event before the capture begins, or record it inside the capture."),
    "cudaErrorStreamCaptureImplicit": (
        "work on the legacy default stream would implicitly wait on the capturing stream",
        "Issue that work on a stream of its own, not on the legacy default stream."),
    "cudaErrorCapturedEvent": (
        "the host queried, synchronized or waited on an event last recorded inside the capture: "
        "a captured event marks a point in a graph, not in time",
        "Query or synchronize such an event only after a replay, or use an event recorded outside "
        "the capture."),
    "shape_mismatch": (
        "a torch op checked shapes on the host while capturing and raised",
        "Keep every tensor a captured op reads at its full shape until that op is issued."),
    "aborted": (
        "the program raised an exception while capturing, so the capture was abandoned",
        "Fix the exception (its traceback names the op) and capture again."),
}


# First errors raised inside the captured block: leaving it, capture_end raises Invalidated over them.
_RAISED_INSIDE = frozenset({"cudaErrorStreamCaptureUnsupported", "cudaErrorStreamCaptureIsolation",
                            "cudaErrorStreamCaptureImplicit", "cudaErrorCapturedEvent"})
SEEN_AS = "cudaErrorStreamCaptureInvalidated"


def capture_failed(g: Graph) -> Finding:
    end = g.end
    assert end is not None and end.error is not None
    named = _CUDA_ERROR.search(end.error)
    name = named.group(1) if named else end.error
    meaning, fix = _CAPTURE_ERRORS.get(name, (term(capture_error(name)).meaning, "Fix the error and capture again."))
    emptied = g.emptying(end.step)
    cause = ""
    if emptied and not name.startswith("cudaError"):     # a CUDA error has a cause of its own
        m = emptied[-1]
        reason = f", {m.why}" if m.why else ""
        cause = (f" Before it failed, the host emptied {m.label!r} ({m.op} at step {m.step}{reason}): "
                 f"if the error is a shape check, that is its cause ({GRAPH_HOLDS[SHAPE_ERROR]}).")
    seen = ""
    if name in _RAISED_INSIDE:
        seen = (f" The error you see is {SEEN_AS} (\"operation failed due to a previous error during "
                f"capture\"): leaving `with torch.cuda.graph(...)`, capture_end raises it over this first "
                f"error, which Python prints above it as its cause.")
    return CAPTURE_FAILED.finding(
        end.step, f"graph {g.id}", (),
        f"The capture of graph {g.id} on stream {end.stream} failed at step {end.step} with "
        f"{end.error!r}: {meaning}.{seen} There is no graph: nothing was frozen and nothing replays, so "
        f"this report has no race or frozen-value finding for it.{cause}",
        f"{fix} Then check the new trace: a failed capture hides every hazard its graph would "
        f"have had.")
