"""The host side of a program: objects whose attributes are host state, owners' tensors rebound,
pinned host buffers copied to the device.

``rt.host_object(label, **attrs)`` makes a ``HostObject``; every capture snapshots
its ints and bools when it begins and ends and records each change
(``HostState``): a replay runs no host code, so what the capture left is what
every replay keeps. ``rt.rebind(owner, attr, new)`` replaces a tensor an owner
holds (``Rebind``). ``rt.host_buffer`` and ``rt.copy_from_host`` are pinned host
memory updated in place and copied in, as a captured copy reads it on replay.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ...trace import HostState, Rebind
from ..errors import ShapeMismatch
from ..graph import Capture
from ..host_objects import HostBuffer, HostObject
from ..tensor import TensorHandle
from ..values import Sym

HostValues = dict[tuple[HostObject, str], Any]


class HostStateCalls:
    """Host objects, rebinding, pinned buffers. Mixed into ``simlib.engine.runtime.Runtime``,
    whose state (``trace``, ``_capture``, ``_host_objects``) and host clock (``_host``) it uses."""

    def host_object(self, label: str, **attrs: Any) -> HostObject:
        """A Python object the program's code reaches (no device work): ``rt.host_object("cache", pos=0)``."""
        obj = HostObject(self, label, attrs)
        self._host_objects.append(obj)
        return obj

    def rebind(self, owner: object, attr: str, new: TensorHandle) -> TensorHandle:
        """``owner.attr = new`` for a tensor the owner holds (``module.weight = nn.Parameter(new)``).

        The owner's reference to the old tensor goes, so it is freed if nothing else (a view)
        holds it. A graph captured before keeps reading the old tensor's address.
        """
        old = getattr(owner, attr)
        if not isinstance(old, TensorHandle) or not isinstance(new, TensorHandle):
            raise TypeError(f"rebind() replaces a tensor with a tensor; {attr!r} holds {type(old).__name__} "
                            f"and the new value is {type(new).__name__}")
        step = self._host(self.profile.host_op_us)
        self.trace.records.append(Rebind(step, self.now, getattr(owner, "label", type(owner).__name__), attr,
                                         old.id, old.ptr, old.nbytes, new.id, new.ptr, new.nbytes, old.label))
        object.__setattr__(owner, attr, new)
        self._release(old, step)
        return new

    def host_buffer(self, shape: Sequence[int], label: str, *, value: str) -> HostBuffer:
        """Pinned host memory holding ``value`` (``torch.empty(shape, pin_memory=True)``, filled)."""
        return HostBuffer(label, tuple(shape), Sym(value))

    def copy_from_host(self, dst: TensorHandle, src: HostBuffer) -> TensorHandle:
        """``dst.copy_(pinned, non_blocking=True)``: an asynchronous copy that reads ``src`` when it
        runs, so under capture every replay copies what the buffer holds then."""
        if dst.numel != math.prod(src.shape):
            self._host(self.profile.host_op_us)
            raise ShapeMismatch(f"copy_: {dst.label!r} has {dst.numel} elements but the pinned buffer "
                                f"{src.label!r} has {math.prod(src.shape)}")
        self.launch("copy_h2d", writes=[dst], fn=lambda: src.value, role="h2d",
                    label=f"copy {src.label} -> {dst.label}")
        return dst

    def _host_values(self) -> HostValues:
        """Every host object's ints and bools now (a capture's snapshot)."""
        return {(obj, name): v for obj in self._host_objects for name, v in obj.host_values().items()}

    def _record_host_changes(self, cap: Capture, step: int) -> None:
        """At a capture's end: a ``HostState`` for each int or bool the capture changed."""
        after = self._host_values()
        for key in dict.fromkeys([*cap.host_before, *after]):
            before, now = cap.host_before.get(key), after.get(key)
            if before != now or type(before) is not type(now):
                obj, name = key
                self.trace.records.append(HostState(step, self.now, cap.graph.id, obj.label, name, repr(before),
                                                    repr(now), obj._changed_at.get(name, "")))
