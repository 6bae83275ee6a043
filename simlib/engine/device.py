"""The device: runs scheduled kernels against symbolic memory, in device-time order.

The host decides *when* each kernel runs (``timing.place``) as it launches or
replays; the device applies the effects in time order: a kernel reads its
frozen argument addresses when its inputs are ready and writes its outputs
when it ends, so a kernel on another stream that overlaps it sees the old
contents. Touching address 0 with a nonzero size faults, and the fault is
sticky: nothing runs afterwards. An extent past the end of a live block does
not fault: it reads (or overwrites) whatever the neighbouring blocks hold.

``DeviceMemory`` holds what each address range contains, as symbolic values.
Freed memory keeps its contents: a stale read sees whatever is there now, and
a read past the end of a block reads whatever its neighbours hold.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..trace import Arg, Launch
from .timing import Slot
from .values import Call, Expr, Garbage

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
class DeviceMemory:
    """Symbolic contents of device memory, by address range: (size, value, who wrote it)."""

    _regions: dict[int, tuple[int, Expr, str]] = field(default_factory=dict)
    _starts: list[int] = field(default_factory=list)

    def write(self, ptr: int, nbytes: int, value: Expr, label: str = "") -> None:
        end = ptr + nbytes
        i = max(bisect.bisect_right(self._starts, ptr) - 1, 0)
        while i < len(self._starts) and self._starts[i] < end:
            start = self._starts[i]
            if start + self._regions[start][0] > ptr:
                del self._regions[start]
                del self._starts[i]
            else:
                i += 1
        self._regions[ptr] = (nbytes, value, label)
        bisect.insort(self._starts, ptr)

    def read(self, ptr: int, nbytes: int) -> Expr:
        """What ``nbytes`` at ``ptr`` hold: one write's value (or a slice of it), else garbage
        made of every write the range runs into (a read past the end of a block reads its
        neighbours; no fault, only pointer 0 faults)."""
        exact = self._regions.get(ptr)
        if exact is not None and exact[0] == nbytes:
            return exact[1]
        starts, end = self._starts, ptr + nbytes
        i = bisect.bisect_right(starts, ptr) - 1
        if i >= 0:
            start = starts[i]
            size, value, _ = self._regions[start]
            if start + size >= end:
                off = ptr - start
                return Call(f"bytes[{off}:{off + nbytes}]", (value,))
            if start + size <= ptr:
                i += 1
        else:
            i = 0
        pieces = []
        while i < len(starts) and starts[i] < end:
            pieces.append(self._regions[starts[i]])
            i += 1
        if not pieces:
            return Garbage(f"uninitialised memory at {hex(ptr)}")
        labels = ", ".join(dict.fromkeys(label or "?" for _, _, label in pieces))
        return Garbage(f"{nbytes} bytes at {hex(ptr)} run into {labels}",
                       tuple(value for _, value, _ in pieces))


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
