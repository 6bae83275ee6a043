"""The two streams the MoE layer forks over, real on a GPU and logical on a CPU.

On a GPU, ``DualStreams`` owns the alternate CUDA stream and makes the fork
(``alt.wait_stream(main)``) and the join (``main.wait_stream(alt)``) with real
events. On a CPU there are no streams: every switch is a no-op, but the
logical stream name is still tracked and every event is still reported, so the
recorder's dry run sees the same program structure a GPU capture has.

The layer chooses its dual-stream path by ``gpu_demo.guard.record.dry_run.is_capturing()``,
true while a capture runs, for real or as the CPU dry run.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterator

import torch

from gpu_demo.guard.record import annotate
from gpu_demo.guard.record.annotate import ALT, MAIN


@dataclass
class StreamEvent:
    """A CUDA event (``None`` on a CPU) with the logical id traces refer to."""

    id: int
    cuda: torch.cuda.Event | None


class DualStreams:
    """The main stream (current at ``fork``) and one alternate stream."""

    def __init__(self, device: torch.device) -> None:
        self._on_gpu = device.type == "cuda"
        self._alt = torch.cuda.Stream(device) if self._on_gpu else None
        self._main: torch.cuda.Stream | None = None
        self._ids = itertools.count()

    def _stream(self, name: str) -> torch.cuda.Stream:
        if name == ALT:
            return self._alt
        return self._main if self._main is not None else torch.cuda.current_stream()

    def record(self, on: str) -> StreamEvent:
        """Record a new event on logical stream ``on``."""
        event = StreamEvent(next(self._ids), torch.cuda.Event() if self._on_gpu else None)
        annotate.stream_event("record", event.id, on)
        if event.cuda is not None:
            event.cuda.record(self._stream(on))
        return event

    def wait(self, event: StreamEvent, on: str) -> None:
        """Make logical stream ``on`` wait for ``event``."""
        annotate.stream_event("wait", event.id, on)
        if event.cuda is not None:
            self._stream(on).wait_event(event.cuda)

    def query(self, event: StreamEvent) -> None:
        """Ask the host whether ``event`` has completed (illegal on a captured event)."""
        annotate.stream_event("query", event.id, None)
        if event.cuda is not None:
            event.cuda.query()

    def fork(self) -> None:
        """``alt.wait_stream(main)``: the alternate stream starts after main's work."""
        self._main = torch.cuda.current_stream() if self._on_gpu else None
        self.wait(self.record(MAIN), ALT)

    def join(self) -> None:
        """``main.wait_stream(alt)``: main continues only after the alternate's work."""
        self.wait(self.record(ALT), MAIN)

    @contextmanager
    def on(self, name: str) -> Iterator[None]:
        """Issue the ops inside on logical stream ``name`` (``main`` or ``alt``)."""
        if name not in (MAIN, ALT):
            raise ValueError(f"stream {name!r} is not one of {MAIN!r}, {ALT!r}")
        switch = torch.cuda.stream(self._alt) if name == ALT and self._on_gpu else nullcontext()
        with switch, annotate.issuing_on(name):
            yield
