"""The host side of a program that graphs never see again: objects whose attributes are host
state, and pinned host buffers that copies read.

A ``HostObject`` is a Python object the captured code reaches (a module, a cache,
a layer). Its int and bool attributes are host state: host code branches and
indexes on them, a capture freezes what they were, and a replay, which runs no
host code, never changes them again. The runtime snapshots them when a capture
begins and ends and records each that changed (``HostState``), with the line
that changed it. Its tensor attributes are the tensors it owns; ``rt.rebind``
replaces one (``module.weight = nn.Parameter(new)``), and a graph captured
before keeps the old one's address.

A ``HostBuffer`` is pinned host memory (``torch.empty(..., pin_memory=True)``):
host code rewrites it in place (``fill``), and a host-to-device copy from it
(``rt.copy_from_host``) reads what it holds when the copy runs on the device,
so a captured copy reads the buffer's contents at each replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .sites import user_site
from .values import Expr, Sym

if TYPE_CHECKING:   # runtime imports host_objects
    from .runtime import Runtime

HOST_TYPES = (int, bool)     # the attribute types a capture's snapshot compares


class HostObject:
    """A program's Python object (``rt.host_object("cache", pos=0)``); ``label`` names it in traces."""

    def __init__(self, rt: "Runtime", label: str, attrs: dict[str, Any]) -> None:
        object.__setattr__(self, "_rt", rt)
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "_changed_at", {})
        for name, value in attrs.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        """Set it; during a capture, remember the line that did (``HostState.site``)."""
        if self._rt._capture is not None:
            self._changed_at[name] = user_site()
        object.__setattr__(self, name, value)

    def host_values(self) -> dict[str, Any]:
        """Its int and bool attributes, as a capture's snapshot reads them."""
        return {k: v for k, v in vars(self).items() if type(v) in HOST_TYPES and not k.startswith("_")}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k != "label")
        return f"<HostObject {self.label!r} {shown}>"


class HostBuffer:
    """Pinned host memory holding ``value`` (a symbol for a string); ``fill`` rewrites it in place."""

    def __init__(self, label: str, shape: tuple[int, ...], value: Expr) -> None:
        self.label = label
        self.shape = shape
        self.value = value

    def fill(self, value: Expr | str) -> None:
        """Host code writes new data into the buffer (``pinned.copy_(new_cpu_data)``); no device work."""
        self.value = Sym(value) if isinstance(value, str) else value

    def __repr__(self) -> str:
        return f"<HostBuffer {self.label!r} {self.value}>"
