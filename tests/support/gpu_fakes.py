"""A GPU played to the recorder on a CPU, for tests (not collected: no ``test_`` prefix).

What a GPU would tell the recorder is played to it: the ``torch.cuda._gpu_trace``
reports are fired as torch's C++ fires them (``runtime``, with fake stream and
event ids), the current stream comes from a fake ``Device``,
the caching allocator's callbacks come from ``FakeAllocator`` around real CPU
ops, and ``CUDAGraph``'s methods are no-ops the recorder wraps.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Iterator

import pytest
import torch
from torch.cuda import _gpu_trace
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gpu_demo.guard.record.cuda_device import Device
from gpu_demo.guard.record.recorder import CaptureRecorder
from simlib.trace import Launch, Trace

DEFAULT, CAPTURE, ALT, ALT2, SIDE = 0, 5000, 11000, 12000, 13000   # raw cudaStream_t ids


def _report(registry: str) -> Callable[..., None]:
    """One ``torch.cuda._gpu_trace`` report, made as torch's C++ makes it: look up
    ``fire_callbacks`` on the registry object and call it (``gpu_demo.guard.record.hooks`` routes it)."""
    def fire(*args: int) -> None:
        getattr(_gpu_trace, registry).fire_callbacks(*args)
    return fire


runtime = SimpleNamespace(   # the CUDA runtime's reports, with fake ids
    memory_allocation=_report("MemoryAllocationCallbacks"),
    memory_deallocation=_report("MemoryDeallocationCallbacks"),
    event_creation=_report("EventCreationCallbacks"),
    event_deletion=_report("EventDeletionCallbacks"),
    event_record=_report("EventRecordCallbacks"),
    event_wait=_report("EventWaitCallbacks"),
    device_synchronization=_report("DeviceSynchronizationCallbacks"),
    stream_synchronization=_report("StreamSynchronizationCallbacks"),
    event_synchronization=_report("EventSynchronizationCallbacks"),
)


@dataclass
class FakeStreams:
    """The current CUDA stream, as ``torch.cuda.stream(s)`` would switch it."""

    current: int = DEFAULT

    def device(self) -> Device:
        return Device(lambda: self.current, traced=True)

    @contextmanager
    def on(self, raw: int) -> Iterator[None]:
        previous, self.current = self.current, raw
        try:
            yield
        finally:
            self.current = previous


class FakeAllocator(TorchDispatchMode):
    """Reports allocations and frees of real CPU ops as the CUDA caching allocator does.

    Entered before the recorder, it runs below it: the callbacks fire while the
    recorder's op is in progress, as they do on a GPU.
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        mutated = args[0] if func.overloadpacket in (torch.ops.aten.set_, torch.ops.aten.resize_) else None
        released = None
        if mutated is not None:
            storage = mutated.untyped_storage()
            released = (storage.data_ptr(), StorageWeakRef(storage))
            del storage
        out = func(*args, **kwargs)
        given = {id(a) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and id(t) not in given and t.untyped_storage().nbytes():
                runtime.memory_allocation(t.untyped_storage().data_ptr())
        if released is not None and released[1].expired():
            runtime.memory_deallocation(released[0])
        return out


class FakeGraph:
    """Stands in for a ``torch.cuda.CUDAGraph`` instance."""


@pytest.fixture
def fake_graph_methods(monkeypatch):
    """``CUDAGraph``'s methods as no-ops (restored after the test); the recorder wraps these."""
    calls = []
    for name in ("capture_begin", "capture_end", "replay"):
        monkeypatch.setattr(torch.cuda.CUDAGraph, name, lambda self, *a, _n=name, **k: calls.append(_n))
    return calls


@pytest.fixture
def streams():
    return FakeStreams()


@contextmanager
def recording(streams: FakeStreams, **options) -> Iterator[CaptureRecorder]:
    with FakeAllocator(), CaptureRecorder(device=streams.device(), **options) as recorder:
        yield recorder


@contextmanager
def cuda_graph(graph: object, streams: FakeStreams) -> Iterator[None]:
    """What ``with torch.cuda.graph(graph):`` calls, on its own capture stream."""
    with streams.on(CAPTURE):
        torch.cuda.CUDAGraph.capture_begin(graph)
        try:
            yield
        finally:
            torch.cuda.CUDAGraph.capture_end(graph)


@contextmanager
def wait_stream(waiter: int, waited: int, event: int) -> Iterator[None]:
    """``waiter.wait_stream(waited)`` as the runtime reports it; yields in between nothing."""
    runtime.event_creation(event)
    runtime.event_record(event, waited)
    runtime.event_wait(event, waiter)
    runtime.event_deletion(event)
    yield


def fork(event: int = 900) -> None:
    with wait_stream(ALT, CAPTURE, event):
        pass


def join(event: int = 901) -> None:
    with wait_stream(CAPTURE, ALT, event):
        pass


def graph_launches(trace: Trace, graph: int = 0) -> list[Launch]:
    return trace.launches(graph=graph)


def by_kernel(trace: Trace, name: str) -> list[Launch]:
    return [launch for launch in trace.of(Launch) if name in launch.kernel]
