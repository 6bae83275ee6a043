"""Streams, events and host synchronisation: the ``torch.cuda`` calls that order work."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ...trace import EventOp, HostSync
from ..errors import CapturedEvent, StreamCaptureIsolation, StreamCaptureUnsupported
from ..stream import Event, Stream


class StreamCalls:
    """Streams and events (``torch.cuda.Stream``, ``Event``), waits and syncs.

    Mixed into ``simlib.engine.runtime.Runtime``, whose state (``trace``, ``streams``, ``_capture``, ...)
    and host clock (``_host``) it uses.
    """

    def Stream(self, name: str, *, blocking: bool = False) -> Stream:  # noqa: N802 (mirrors torch)
        """A new stream (``torch.cuda.Stream()``); names must be unique."""
        if name in self.streams:
            raise ValueError(f"a stream named {name!r} already exists; pick another name")
        s = Stream(self, name, blocking=blocking)
        self.streams[name] = s
        return s

    def Event(self) -> Event:  # noqa: N802 (mirrors torch)
        return Event(self, self._next_id("event"))

    @contextmanager
    def stream(self, s: Stream) -> Iterator[Stream]:
        """``with torch.cuda.stream(s):`` make ``s`` the current stream."""
        if not isinstance(s, Stream):
            raise TypeError(f"rt.stream() takes a Stream, got {type(s).__name__}")
        previous, self.current_stream = self.current_stream, s
        try:
            yield s
        finally:
            self.current_stream = previous

    def record_event(self, event: Event, s: Stream) -> None:
        step = self._host(self.profile.host_op_us)
        cap = self._check_capture_ok(s, "event.record()")
        if cap is not None:
            event.graph, event.nodes, event.time = cap.graph.id, cap.frontier[s.name], None
        else:
            event.graph, event.nodes, event.time = None, (), s.ready
        event.stream = s.name
        self.trace.records.append(EventOp(step, self.now, "record", event.id, s.name,
                                          event.graph, event.nodes))

    def wait_event(self, s: Stream, event: Event) -> None:
        step = self._host(self.profile.host_op_us)
        cap = self._check_capture_ok(s, "stream.wait_event()")
        if event.captured:
            active = self._capture
            if active is None or active.graph.id != event.graph:
                raise CapturedEvent(
                    f"stream {s.name!r} waits on event {event.id}, last recorded inside the "
                    f"capture of graph {event.graph}, which has ended. Record the event again "
                    "outside the capture before waiting on it.")
            # Waiting on a captured event pulls the stream into the capture (a fork).
            current = active.frontier.get(s.name, ())
            active.frontier[s.name] = tuple(dict.fromkeys(current + event.nodes))
        elif cap is not None and event.time is not None:
            self._fail(StreamCaptureIsolation(
                f"stream {s.name!r} is being captured and waits on event {event.id}, recorded "
                f"outside the capture on {event.stream!r}. A graph cannot depend on uncaptured "
                "work: record the event inside the capture, or finish that work before "
                "capture begins."))
        elif event.time is not None:
            s.waits = max(s.waits, event.time)
        self.trace.records.append(EventOp(step, self.now, "wait", event.id, s.name,
                                          event.graph, event.nodes))

    def wait_stream(self, s: Stream, other: Stream) -> None:
        """``s.wait_stream(other)``: record an event on ``other`` and wait on it."""
        event = self.Event()
        self.record_event(event, other)
        self.wait_event(s, event)

    def query_event(self, event: Event) -> bool:
        step = self._host(self.profile.host_op_us)
        self._refuse_captured_event(event, "event.query()")
        self._refuse_unsafe(f"event.query() on event {event.id}")
        self.trace.records.append(EventOp(step, self.now, "query", event.id, None, None))
        return event.time is None or event.time <= self.now

    def synchronize_event(self, event: Event) -> None:
        step = self._host(self.profile.host_op_us)
        self._refuse_captured_event(event, "event.synchronize()")
        self._refuse_unsafe(f"event.synchronize() on event {event.id}")
        self.trace.records.append(EventOp(step, self.now, "synchronize", event.id, None, None))
        if event.time is not None:
            self._wait_device(event.time)

    def _refuse_captured_event(self, event: Event, what: str) -> None:
        if event.captured:
            raise CapturedEvent(
                f"{what} on event {event.id}, last recorded inside the capture of graph "
                f"{event.graph}: a captured event marks a point in a graph, not in time, so the "
                "host cannot ask whether it happened. Query an event recorded outside capture.")

    def synchronize_stream(self, s: Stream) -> None:
        step = self._host(self.profile.host_op_us)
        if self._capturing(s) is not None:
            self._fail(StreamCaptureUnsupported(
                f"stream.synchronize() on {s.name!r} while it is being captured: there is no "
                "device work to wait for during capture. Move the sync out of the captured region."))
        self._refuse_unsafe(f"stream.synchronize() on {s.name!r}")
        self.trace.records.append(HostSync(step, self.now, "stream.synchronize", "", s.name))
        self._wait_device(s.ready)

    def synchronize(self) -> None:
        """``torch.cuda.synchronize()``: the host waits for every stream."""
        step = self._host(self.profile.host_op_us)
        if self._capture is not None:
            self._fail(StreamCaptureUnsupported(
                "torch.cuda.synchronize() while a stream is being captured; a device-wide sync "
                "is not permitted during capture. Move the sync before or after the capture."))
        self.trace.records.append(HostSync(step, self.now, "synchronize", "", None))
        self._wait_device(max(s.ready for s in self.streams.values()))
