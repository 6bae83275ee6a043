"""Streams and events: the ordering vocabulary of CUDA, as PyTorch exposes it.

A ``Stream`` is a FIFO queue of device work; work on different streams may
overlap unless an ``Event`` orders it. The device-side state a stream keeps
(when its last kernel ends, which cross-stream waits the next kernel must
honour) lives here; what the operations *mean* under capture lives in the
runtime, which every method forwards to.

``Stream(..., blocking=True)`` models a stream created with default flags,
which the legacy default stream implicitly synchronises with. PyTorch's own
streams are non-blocking, so that is the default here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # runtime imports stream
    from .runtime import Runtime

NEVER = float("-inf")


class Stream:
    """A device work queue (``torch.cuda.Stream``)."""

    def __init__(self, rt: "Runtime", name: str, *, legacy: bool = False, blocking: bool = False) -> None:
        self._rt = rt
        self.name = name
        self.legacy = legacy
        self.blocking = blocking or legacy
        self.tail_start = 0.0   # device time the last kernel on this stream started
        self.tail_end: float | None = None  # ... and ended (None: nothing ran yet)
        self.waits = NEVER      # cross-stream readiness the next kernel must honour

    @property
    def ready(self) -> float:
        """When everything issued to this stream so far is complete."""
        return max(self.tail_end if self.tail_end is not None else 0.0, self.waits)

    def wait_stream(self, other: "Stream") -> None:
        """Later work on this stream waits for everything issued to ``other`` so far."""
        self._rt.wait_stream(self, other)

    def wait_event(self, event: "Event") -> None:
        self._rt.wait_event(self, event)

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event or self._rt.Event()
        self._rt.record_event(event, self)
        return event

    def synchronize(self) -> None:
        self._rt.synchronize_stream(self)

    def __repr__(self) -> str:
        kind = "legacy default " if self.legacy else ""
        return f"<{kind}Stream {self.name!r}>"


class Event:
    """A marker in a stream (``torch.cuda.Event``).

    Recorded outside capture it holds a device time; recorded inside a capture
    it holds the graph nodes it follows, and stays a *captured* event (which
    the host may not query or synchronise) until recorded again.
    """

    def __init__(self, rt: "Runtime", id: int) -> None:
        self._rt = rt
        self.id = id
        self.time: float | None = None        # eager: when the recorded work completes
        self.graph: int | None = None         # captured: which capture recorded it
        self.nodes: tuple[int, ...] = ()      # captured: the nodes it follows
        self.stream: str | None = None

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def record(self, stream: Stream | None = None) -> None:
        self._rt.record_event(self, stream or self._rt.current_stream)

    def wait(self, stream: Stream | None = None) -> None:
        self._rt.wait_event(stream or self._rt.current_stream, self)

    def query(self) -> bool:
        return self._rt.query_event(self)

    def synchronize(self) -> None:
        self._rt.synchronize_event(self)

    def __repr__(self) -> str:
        if self.captured:
            state = f"captured in graph {self.graph} after nodes {list(self.nodes)}"
        elif self.time is not None:
            state = f"recorded on {self.stream!r}, done at t={self.time:.1f}us"
        else:
            state = "never recorded"
        return f"<Event {self.id} {state}>"
