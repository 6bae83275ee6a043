"""What the CUDA runtime tells Python from below dispatch, routed to the active recorders.

``torch.cuda._gpu_trace`` calls back on event creation, record, wait and
deletion, on every caching-allocator allocation and deallocation, and on
device, stream and event synchronization (after
``torch._C._activate_gpu_trace()``; see ``torch/cuda/_sanitizer.py``). The
callbacks carry raw ids only: ``cudaEvent_t``/``cudaStream_t`` integers and
block pointers, no sizes.

Registrations are permanent, so this module registers one set of functions
once, the first time a recorder starts, and each of them forwards to every
recorder active at that moment and does nothing when none is. Tests drive the
same functions directly with fake ids: no GPU is needed to exercise the
recorder's bookkeeping.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Protocol

import torch

EventId = int
StreamId = int
DataPtr = int


class GpuTraceListener(Protocol):
    """A recorder, as the callbacks see it."""

    def on_event_created(self, event: EventId) -> None: ...

    def on_event_deleted(self, event: EventId) -> None: ...

    def on_event_recorded(self, event: EventId, stream: StreamId) -> None: ...

    def on_event_waited(self, event: EventId, stream: StreamId) -> None: ...

    def on_allocated(self, ptr: DataPtr) -> None: ...

    def on_freed(self, ptr: DataPtr) -> None: ...

    def on_synchronized(self, op: str, stream: StreamId | None, event: EventId | None) -> None: ...


_active: list[GpuTraceListener] = []
_registered = False


def active() -> tuple[GpuTraceListener, ...]:
    """The recorders now listening, innermost last."""
    return tuple(_active)


@contextmanager
def listening(listener: GpuTraceListener) -> Iterator[None]:
    """Forward the GPU trace callbacks to ``listener`` while inside."""
    _register_once()
    _active.append(listener)
    try:
        yield
    finally:
        _active.remove(listener)


def _register_once() -> None:
    global _registered
    if _registered:
        return
    from torch.cuda import _gpu_trace as trace

    trace.register_callback_for_event_creation(event_creation)
    trace.register_callback_for_event_deletion(event_deletion)
    trace.register_callback_for_event_record(event_record)
    trace.register_callback_for_event_wait(event_wait)
    trace.register_callback_for_memory_allocation(memory_allocation)
    trace.register_callback_for_memory_deallocation(memory_deallocation)
    trace.register_callback_for_device_synchronization(device_synchronization)
    trace.register_callback_for_stream_synchronization(stream_synchronization)
    trace.register_callback_for_event_synchronization(event_synchronization)
    if torch.cuda.is_available():
        torch._C._activate_gpu_trace()
    _registered = True


# -- the callbacks (module level: registered once, driven directly by tests) ----------

def event_creation(event: EventId) -> None:
    for listener in _active:
        listener.on_event_created(event)


def event_deletion(event: EventId) -> None:
    for listener in _active:
        listener.on_event_deleted(event)


def event_record(event: EventId, stream: StreamId) -> None:
    for listener in _active:
        listener.on_event_recorded(event, stream)


def event_wait(event: EventId, stream: StreamId) -> None:
    for listener in _active:
        listener.on_event_waited(event, stream)


def memory_allocation(ptr: DataPtr) -> None:
    for listener in _active:
        listener.on_allocated(ptr)


def memory_deallocation(ptr: DataPtr) -> None:
    for listener in _active:
        listener.on_freed(ptr)


def device_synchronization() -> None:
    for listener in _active:
        listener.on_synchronized("synchronize", None, None)


def stream_synchronization(stream: StreamId) -> None:
    for listener in _active:
        listener.on_synchronized("stream.synchronize", stream, None)


def event_synchronization(event: EventId) -> None:
    for listener in _active:
        listener.on_synchronized("event.synchronize", None, event)
