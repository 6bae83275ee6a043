"""The device: runs scheduled kernels against symbolic memory, in device-time order.

The host decides *when* each kernel runs (``timing.place``) as it launches or
replays; the device applies the effects in time order: a kernel reads its
frozen argument addresses when its inputs are ready and writes its outputs
when it ends, so a kernel on another stream that overlaps it sees the old
contents. Touching address 0 with a nonzero size faults, and the fault is
sticky: nothing runs afterwards.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .memory import DeviceMemory
from .timing import Slot
from .trace import Arg, Launch
from .values import Expr

KernelFn = Callable[..., "Expr | Sequence[Expr]"]


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
    _actions: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    _seq: int = 0

    def schedule(self, launch: Launch, slot: Slot, fn: KernelFn) -> None:
        """Queue ``launch`` to read at ``slot.data`` and write at ``slot.end``."""
        self._push(slot.data, lambda: self._start(launch, slot, fn))

    def advance(self, until: float) -> None:
        """Apply every effect due at or before device time ``until``."""
        actions = self._actions
        while actions and actions[0][0] <= until:
            _, _, action = heapq.heappop(actions)
            if self.fault is None:
                action()

    def drain(self) -> None:
        self.advance(float("inf"))

    def _push(self, time: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._actions, (time, self._seq, action))
        self._seq += 1

    def _start(self, launch: Launch, slot: Slot, fn: KernelFn) -> None:
        bad = next((a for a in launch.args if a.ptr == 0 and a.nbytes > 0), None)
        if bad is not None:
            self.fault = DeviceFault(launch, slot.data, _null_detail(launch, bad))
            return
        reads = [self.memory.read(a.ptr, a.nbytes) for a in launch.args if a.reads]
        out = fn(*reads)
        values = (out,) if isinstance(out, Expr) else tuple(out)
        writes = [a for a in launch.args if a.writes]
        if len(values) != len(writes):
            raise ValueError(
                f"kernel {launch.kernel!r}: its function returned {len(values)} value(s) "
                f"for {len(writes)} written argument(s); return one value per written argument"
            )
        self._push(slot.end, lambda: self._finish(writes, values))

    def _finish(self, writes: list[Arg], values: tuple[Expr, ...]) -> None:
        for arg, value in zip(writes, values):
            self.memory.write(arg.ptr, arg.nbytes, value)


def _null_detail(launch: Launch, arg: Arg) -> str:
    verb = "wrote" if arg.writes and not arg.reads else "read"
    return (f"kernel {launch.kernel!r} ({launch.label}) {verb} {arg.nbytes} bytes at address 0 "
            f"through argument {arg.name!r} (tensor {arg.label!r}, frozen at host step {launch.step})")
