"""What the CUDA runtime tells Python from below dispatch, routed to the active recorders.

``torch.cuda._gpu_trace`` reports event creation, record, wait and deletion,
every caching-allocator allocation and deallocation, and device, stream and
event synchronization (after ``torch._C._activate_gpu_trace()``; see
``torch/cuda/_sanitizer.py``). The reports carry raw ids only:
``cudaEvent_t``/``cudaStream_t`` integers and block pointers, no sizes.

For each report torch's C++ looks up ``fire_callbacks`` on one of the
module's ``CallbackRegistry`` objects and calls it, and that method calls the
registered callbacks in a Python loop. Allocations and frees come once or
more per op, so their cost is the recorder's floor: this module routes each
report straight to the one recorder listening, by setting ``fire_callbacks``
on the registry object itself to that recorder's bound method (or, for
allocations, to the ``list.append`` it names: no Python frame at all). With
several recorders, or callbacks someone registered the documented way (the
CUDA sanitizer), a fan-out calls them all; with no recorder, torch's own
method is back. A callback registered the documented way while a recorder
listens alone is called from the next route change on (``reroute``).

Once activated, torch keeps making these reports for the rest of the process,
recorder or not: the activation is left until the first recorder starts. While
nobody registered a callback and no recorder listens, or the one listening says
it needs none (``quiet``: it stands aside and follows the frees it needs
through storages), ``report_gate`` switches them off at their source. Left on
with nobody listening they cost every allocation and free, and a report made
while an error unwinds (a free on the way out) fails in torch's C++ and turns
the program's own error into ``SystemError: error return without exception
set`` (seen on the H200 after a check in the same process). A callback
registered the documented way (the CUDA sanitizer's) reroutes at once
(``_watch_registrations``), which switches them on again.
Tests fire the registries as torch's C++ does, with fake ids: no GPU is
needed to exercise the recorder's bookkeeping.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Protocol

import torch
from torch._utils import CallbackRegistry

from gpu_demo.guard.record import report_gate

EventId = int
StreamId = int
DataPtr = int


class GpuTraceListener(Protocol):
    """A recorder, as the reports see it. ``on_allocated`` is an attribute, not a
    method: what takes allocation pointers now, or ``None`` when none are of interest
    (a listener that changes it calls ``reroute``)."""

    on_allocated: Callable[[DataPtr], Any] | None
    quiet: bool   # needs no report now (``report_gate``)

    def on_event_created(self, event: EventId) -> None: ...

    def on_event_deleted(self, event: EventId) -> None: ...

    def on_event_recorded(self, event: EventId, stream: StreamId) -> None: ...

    def on_event_waited(self, event: EventId, stream: StreamId) -> None: ...

    def on_freed(self, ptr: DataPtr) -> None: ...

    def on_synchronized(self, op: str, stream: StreamId | None, event: EventId | None) -> None: ...


Route = Callable[[GpuTraceListener], Callable[..., Any] | None]

# torch.cuda._gpu_trace's registries, and what each report reaches on a listener.
ROUTES: dict[str, Route] = {
    "EventCreationCallbacks": lambda listener: listener.on_event_created,
    "EventDeletionCallbacks": lambda listener: listener.on_event_deleted,
    "EventRecordCallbacks": lambda listener: listener.on_event_recorded,
    "EventWaitCallbacks": lambda listener: listener.on_event_waited,
    "MemoryAllocationCallbacks": lambda listener: listener.on_allocated,
    "MemoryDeallocationCallbacks": lambda listener: listener.on_freed,
    "DeviceSynchronizationCallbacks":
        lambda listener: lambda: listener.on_synchronized("synchronize", None, None),
    "StreamSynchronizationCallbacks":
        lambda listener: lambda stream: listener.on_synchronized("stream.synchronize", stream, None),
    "EventSynchronizationCallbacks":
        lambda listener: lambda event: listener.on_synchronized("event.synchronize", None, event),
}

_active: list[GpuTraceListener] = []
_activated = False


def active() -> tuple[GpuTraceListener, ...]:
    """The recorders now listening, innermost last."""
    return tuple(_active)


@contextmanager
def listening(listener: GpuTraceListener) -> Iterator[None]:
    """Route the GPU trace reports to ``listener`` while inside."""
    _activate_once()
    _watch_registrations()
    _active.append(listener)
    reroute()
    try:
        yield
    finally:
        _active.remove(listener)
        reroute()


def reroute() -> None:
    """Point each registry's ``fire_callbacks`` at what the active listeners take now, and let the
    reports be made, or not (``report_gate``)."""
    from torch.cuda import _gpu_trace

    registered = any(registry.callback_list for registry in _registries())
    for name, route in ROUTES.items():
        registry = getattr(_gpu_trace, name)
        registry.__dict__.pop("fire_callbacks", None)   # torch's own method, unless set below
        if not _active:
            continue
        if len(_active) == 1 and not registry.callback_list:
            target = route(_active[0])
            if target is not None:
                registry.fire_callbacks = target
        else:
            registry.fire_callbacks = _fan_out(registry, route, tuple(_active))
    if not registered and (not _active or (len(_active) == 1 and getattr(_active[0], "quiet", False))):
        report_gate.GATE.shut()
    else:
        report_gate.GATE.open()


def _fan_out(registry: Any, route: Route, listeners: tuple[GpuTraceListener, ...]) -> Callable[..., None]:
    """Torch's registered callbacks, then each listener's route (those that take the report)."""
    targets = [target for target in map(route, listeners) if target is not None]
    torch_fire = type(registry).fire_callbacks

    def fire(*args: Any) -> None:
        torch_fire(registry, *args)
        for target in targets:
            target(*args)

    return fire


def _registries() -> list[Any]:
    """Every ``CallbackRegistry`` of ``torch.cuda._gpu_trace``."""
    from torch.cuda import _gpu_trace
    return [r for r in vars(_gpu_trace).values() if isinstance(r, CallbackRegistry)]


def _watch_registrations() -> None:
    """From now on a callback registered the documented way reroutes at once: its reports are
    made even where the gate had switched them off."""
    for registry in _registries():
        if "add_callback" not in registry.__dict__:
            registry.add_callback = functools.partial(_registered, registry)


def _registered(registry: Any, callback: Callable[..., Any]) -> None:
    type(registry).add_callback(registry, callback)
    reroute()


def _activate_once() -> None:
    global _activated
    if not _activated and torch.cuda.is_available():
        torch._C._activate_gpu_trace()
        _activated = True
