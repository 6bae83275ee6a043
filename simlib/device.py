"""The device: runs scheduled kernels against symbolic memory, in device-time order.

The host decides *when* each kernel runs (``timing.place``) as it launches or
replays; the device applies the effects in time order: a kernel reads its
frozen argument addresses when its inputs are ready and writes its outputs
when it ends, so a kernel on another stream that overlaps it sees the old
contents. Touching address 0 with a nonzero size faults, and the fault is
sticky: nothing runs afterwards. An extent past the end of a live block does
not fault: it reads (or overwrites) whatever the neighbouring blocks hold.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .memory import DeviceMemory
from .timing import Slot
from .trace import Arg, Launch
from .values import Expr

KernelFn = Callable[..., "Expr | Sequence[Expr]"]
# At equal times a finish goes before a start: a kernel whose inputs are ready the
# instant its predecessor ends (PDL) must read that predecessor's output.
_FINISH, _START = 0, 1


@dataclass
class DeviceFault:
    """What the device saw when it faulted."""

    launch: Launch
    time: float
    detail: str


@dataclass
class Device:
    memory: DeviceMemory = field(default_factory=DeviceMemory)
    fault: DeviceFault | None = None
    # (time, what, sequence, launch, payload): a heap; ties: finishes first, then issue order.
    _actions: list[tuple[float, int, int, Launch, Any]] = field(default_factory=list)
    _seq: int = 0

    def schedule(self, launch: Launch, slot: Slot, fn: KernelFn) -> None:
        """Queue ``launch`` to read at ``slot.data`` and write at ``slot.end``."""
        heapq.heappush(self._actions, (slot.data, _START, self._seq, launch, (slot.end, fn)))
        self._seq += 1

    def due(self, until: float) -> bool:
        """Is any effect due at or before device time ``until``?"""
        return bool(self._actions) and self._actions[0][0] <= until

    def advance(self, until: float) -> None:
        """Apply every effect due at or before device time ``until``."""
        actions = self._actions
        while actions and actions[0][0] <= until and self.fault is None:
            time, what, _, launch, payload = heapq.heappop(actions)
            if what == _START:
                self._start(launch, time, *payload)
            else:
                write = self.memory.write
                for arg, value in zip((a for a in launch.args if "w" in a.access), payload):
                    write(arg.ptr, arg.nbytes, value, arg.label)

    def _start(self, launch: Launch, time: float, end: float, fn: KernelFn) -> None:
        read = self.memory.read
        reads = []
        for a in launch.args:
            if a.ptr == 0 and a.nbytes > 0:
                self.fault = DeviceFault(launch, time, _null_detail(launch, a))
                return
            if "r" in a.access:
                reads.append(read(a.ptr, a.nbytes))
        out = fn(*reads)
        values = (out,) if isinstance(out, Expr) else tuple(out)
        n_writes = sum(1 for a in launch.args if "w" in a.access)
        if len(values) != n_writes:
            raise ValueError(
                f"kernel {launch.kernel!r}: its function returned {len(values)} value(s) "
                f"for {n_writes} written argument(s); return one value per written argument")
        heapq.heappush(self._actions, (end, _FINISH, self._seq, launch, values))
        self._seq += 1


def _null_detail(launch: Launch, arg: Arg) -> str:
    verb = "wrote" if arg.writes and not arg.reads else "read"
    return (f"kernel {launch.kernel!r} ({launch.label}) {verb} {arg.nbytes} bytes at address 0 "
            f"through argument {arg.name!r} (tensor {arg.label!r}, frozen at host step {launch.step})")
