"""The host thread and its CUDA runtime: the API a simulated program calls.

A program is ordinary Python that calls a ``Runtime`` the way real code calls
``torch`` and ``torch.cuda``. Every call is one host step: it costs host time,
is appended to ``rt.trace``, and runs in program order. Launches are
asynchronous: the host snapshots the arguments, schedules the kernel on the
device model and moves on. Under capture, launches become graph nodes that run
only when the graph replays, with the arguments frozen at capture time.

    rt = Runtime()
    x = rt.from_host((16, 512), "x", value="x1")
    with rt.graph(label="decode") as g:
        y = rt.op("mlp", x, out_shape=(16, 512), role="shared")
    x.copy_(rt.from_host((16, 512), "x_new", value="x2"))
    g.replay()
    rt.read(y)            # -> mlp(x2)

Each group of calls has a module of its own, mixed into ``Runtime``:
``ordering`` (streams, events, syncs), ``tensors`` (allocation, views, metadata
changes, frees), ``launches`` (launches and ops), ``graph_capture`` (``rt.graph()``
and the rules a call must pass meanwhile), ``replay`` and ``program_calls``
(``rt.call()``, the calls the checker compares), ``random_ops`` (generators and
the random ops that draw from them) and ``host_state`` (host objects, rebinding
an owner's tensor, pinned host buffers). This module holds
the state they share and the host clock every call starts with.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from ...trace import DEFAULT_GENERATOR, Fault, Trace
from ..allocator import CachingAllocator
from ..device import Device, KernelFn
from ..errors import IllegalAddress
from ..generators import Generator
from ..graph import Capture, CapturedGraph
from ..host_objects import HostObject
from ..stream import Stream
from ..timing import Profile
from .graph_capture import CaptureCalls
from .host_state import HostStateCalls
from .launches import KernelCalls
from .ordering import StreamCalls
from .program_calls import ProgramCalls
from .random_ops import RandomCalls
from .replay import ReplayCalls
from .tensors import TensorCalls

if TYPE_CHECKING:   # schedules imports runtime
    from ..schedules import Schedule

__all__ = ["Runtime"]


class Runtime(StreamCalls, TensorCalls, KernelCalls, CaptureCalls, ReplayCalls, ProgramCalls, RandomCalls,
              HostStateCalls):
    """One host thread driving one simulated GPU.

    ``schedule`` (``simlib.engine.schedules.Schedule``) adds orders between graph nodes
    that every replay must honour: how the schedule explorer realises each
    order of a race. Without it, replay timing follows the profile alone.
    ``reuse_default=False``: the allocator never hands a block freed in the default
    pool out again (``simlib.engine.allocator``).
    """

    def __init__(self, profile: Profile | None = None, *, schedule: "Schedule | None" = None,
                 reuse_default: bool = True) -> None:
        self.profile = profile or Profile()
        self.schedule = schedule
        self.trace = Trace(meta={"source": "simlib", "profile": self.profile.name})
        self.now = 0.0
        self.step = -1
        self.device = Device()
        self.allocator = CachingAllocator(reuse_default)
        self.default_stream = Stream(self, "default", legacy=True)
        self.current_stream = self.default_stream
        self.streams: dict[str, Stream] = {"default": self.default_stream}
        self.graphs: list[CapturedGraph] = []
        self._capture: Capture | None = None
        self._kernels: dict[int, tuple[KernelFn, float]] = {}   # graph node -> (fn, duration)
        self._ids = {kind: itertools.count() for kind in ("tensor", "storage", "launch", "event")}
        self._sticky: IllegalAddress | None = None
        self._weak: set[int] = set()          # tensor ids of handles that hold no reference
        self._calls: list[int] = []           # the Call records open now (their index)
        self._call_count = 0
        self.default_generator = Generator(DEFAULT_GENERATOR)
        self._generators: dict[str, Generator] = {}
        self._host_objects: list[HostObject] = []

    def _next_id(self, kind: str) -> int:
        return next(self._ids[kind])

    def _host(self, cost: float) -> int:
        """Start one host step: raise a sticky fault, advance the clock and the device."""
        device = self.device
        if self._sticky is not None or device.fault is not None:
            self._raise_fault()
        self.step += 1
        self.now += cost
        if device.due(self.now):
            device.advance(self.now)
            self._raise_fault()
        return self.step

    def _raise_fault(self) -> None:
        if self._sticky is not None:
            raise self._sticky
        fault = self.device.fault
        if fault is not None:
            self._sticky = IllegalAddress(
                f"{fault.detail}. The context is now unusable: every later call fails. "
                "A kernel froze a null pointer; check what the host did to that tensor "
                "before the launch (set_, resize_, dispose) and pass a live buffer.")
            self.trace.records.append(Fault(fault.launch.step, self.now, IllegalAddress.code,
                                            fault.launch.id, fault.detail))
            raise self._sticky

    def _wait_device(self, until: float) -> None:
        """The host blocks until device time ``until``."""
        self.now = max(self.now, until)
        self.device.advance(self.now)
        self._raise_fault()
