"""Which stream each piece of work goes to, and which launches it must come after.

A captured launch depends on the previous launch on its stream plus whatever
its stream waited for through events. The stream order keeps that frontier per
stream (each launch reads and moves it: ``CaptureRecorder._launch``), the
launches each recorded event stands for, and the keys streams and events have
in the records: a raw stream its provisional key (``naming.StreamNames``), a raw
``cudaEvent_t`` a small id. What the program (``annotate``) and the CUDA runtime
(``hooks``) say about events and synchronizations becomes ``EventOp`` and
``HostSync`` records here.
"""

from __future__ import annotations

import itertools

from gpu_demo.guard.record import annotate
from gpu_demo.guard.record.annotate import MAIN
from gpu_demo.guard.record.annotate import marks as _marks
from gpu_demo.guard.record.cuda_device import Device
from gpu_demo.guard.record.journal import Journal
from gpu_demo.guard.record.naming import StreamNames
from simlib.trace import EventOp, HostSync


class StreamOrder:
    """Stream keys, each stream's frontier, and the events between streams."""

    def __init__(self, journal: Journal, device: Device, streams: StreamNames) -> None:
        self.frontier: dict[str, tuple[int, ...]] = {}   # stream -> the launches its next launch follows
        self._journal = journal
        self._device = device
        self._streams = streams
        self._keys: dict[int, str] = {}     # raw stream -> its key (``stream``), until a capture begins or ends
        self._marked: set[int] = set()      # raw streams an ``annotate`` mark has named
        self._events: dict[int, int] = {}   # raw cudaEvent_t -> event id in records
        self._event_deps: dict[int, tuple[int, ...]] = {}   # event id -> the launches its record covers
        self._event_ids = itertools.count()

    def stream(self) -> str:
        """The stream work issued now goes to: the current CUDA stream (provisional
        key, see ``StreamNames``), or on a CPU the ``annotate`` mark (``main`` if none)."""
        raw = self._device.current_stream()
        if raw is None:
            return annotate.current_stream()
        key, mark = self._keys.get(raw), _marks.stream
        if key is None or (mark is not None and raw not in self._marked):
            key = self._keys[raw] = self._streams.saw(raw, capturing=self._journal.graph is not None, mark=mark)
            if mark is not None:
                self._marked.add(raw)
        return key

    def stream_key(self, raw: int) -> str:
        return self._streams.saw(raw, capturing=self._journal.graph is not None)

    def capture_stream(self) -> str:
        """The key of the stream a capture begins on now."""
        raw = self._device.current_stream()
        return self._streams.began_capture(raw) if raw is not None else MAIN

    def capture_began(self) -> None:
        """The capture's launches follow nothing issued before it, and every stream's key is asked
        again (it depends on whether a capture is open)."""
        self.frontier, self._keys = {}, {}

    def capture_ended(self) -> None:
        self._keys = {}

    # -- what the program says (gpu_demo.record.annotate) --------------------------------

    def stream_event(self, op: str, event: int, stream: str | None) -> None:
        if self._device.traced and op in ("record", "wait"):
            return  # the CUDA runtime reports the real event (on_event_recorded/waited)
        self._event(op, event, stream)

    def host_sync(self, op: str, what: str) -> None:
        if not self._device.traced:  # else the runtime reports it (on_synchronized)
            self._journal.emit(HostSync, op=op, label=what, stream=annotate.current_stream())

    # -- what the CUDA runtime says (gpu_demo.record.hooks) -------------------------------

    def on_event_created(self, event: int) -> None:
        self._events[event] = next(self._event_ids)

    def on_event_deleted(self, event: int) -> None:
        self._events.pop(event, None)

    def on_event_recorded(self, event: int, stream: int) -> None:
        self._event("record", self._event_id(event), self.stream_key(stream))

    def on_event_waited(self, event: int, stream: int) -> None:
        self._event("wait", self._event_id(event), self.stream_key(stream))

    def on_synchronized(self, op: str, stream: int | None, event: int | None) -> None:
        if self._journal.recording:
            label = "" if event is None else f"event {self._event_id(event)}"
            self._journal.emit(HostSync, op=op, label=label, stream=None if stream is None else self.stream_key(stream))

    def _event_id(self, raw: int) -> int:
        if raw not in self._events:
            self._events[raw] = next(self._event_ids)
        return self._events[raw]

    def _event(self, op: str, event: int, stream: str | None) -> None:
        journal = self._journal
        if not journal.recording:
            return
        if op == "record":
            deps = self.frontier.get(stream, ())
            self._event_deps[event] = deps
        else:
            deps = self._event_deps.get(event, ())
            if op == "wait":
                self.frontier[stream] = tuple(sorted({*self.frontier.get(stream, ()), *deps}))
        journal.add(EventOp, op, event, stream, journal.graph, deps)
