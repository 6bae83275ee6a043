"""A tensor attribute of a module made to name another tensor (checker rule 14): ``Rebind`` records.

``module.weight = nn.Parameter(new)`` (an RL weight sync, a reload, a LoRA
swap), ``register_parameter`` or ``register_buffer`` under a name already
bound, or a plain tensor attribute set anew: the attribute names a new tensor,
while a graph captured before holds the old one's address. The recorder wraps
``nn.Module.__setattr__``, ``register_parameter`` and ``register_buffer`` while
it records (once, however many recorders are listening) and writes a ``Rebind``
before the attribute changes, so before the free of the old tensor it may
cause. Only once a graph was captured (before, no graph can hold the old
address), and only where the new tensor is on the old one's device.

Not seen: an attribute of an object that is not a module (a cache layer's
``self.keys = new``): ``object.__setattr__`` cannot be wrapped.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Protocol

import torch

from gpu_demo.guard.record.handles import HandleTable
from gpu_demo.guard.record.journal import Journal
from simlib.trace import Rebind

_Module = torch.nn.Module
_inside = threading.local()    # a wrapper below another (``__setattr__`` calls ``register_parameter``)


class RebindListener(Protocol):
    def graph_captured(self, graph: int) -> None:
        self.captured = True

    def on_rebind(self, owner: torch.nn.Module, attr: str, old: torch.Tensor, new: torch.Tensor) -> None: ...


_listeners: list[RebindListener] = []


def _bound(module: _Module, name: str) -> torch.Tensor | None:
    """The tensor ``module.name`` names now (parameter, buffer or plain attribute), else ``None``."""
    for table in ("_parameters", "_buffers"):
        found = module.__dict__.get(table, {}).get(name)
        if found is not None:
            return found
    value = module.__dict__.get(name)
    return value if isinstance(value, torch.Tensor) else None


def _tell(module: _Module, name: str, value: Any) -> None:
    if getattr(_inside, "depth", 0) or not isinstance(value, torch.Tensor) or not isinstance(name, str):
        return
    old = _bound(module, name)
    if old is None or old is value:
        return
    for listener in tuple(_listeners):
        listener.on_rebind(module, name, old, value)


def _wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def rebinding(self: _Module, name: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        _tell(self, name, value)
        _inside.depth = getattr(_inside, "depth", 0) + 1
        try:
            return original(self, name, value, *args, **kwargs)
        finally:
            _inside.depth -= 1
    return rebinding


_METHODS = ("__setattr__", "register_parameter", "register_buffer")


@contextmanager
def listening(listener: RebindListener) -> Iterator[None]:
    """The wrappers in place and telling ``listener`` while inside."""
    if not _listeners:
        originals = {name: _Module.__dict__[name] for name in _METHODS}
        for name, method in originals.items():
            setattr(_Module, name, _wrapper(method))
        _originals.update(originals)
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
        if not _listeners:
            for name, method in _originals.items():
                setattr(_Module, name, method)
            _originals.clear()


_originals: dict[str, Callable[..., Any]] = {}


class RebindLog:
    """Writes a ``Rebind`` for each rebinding it is told of, once a graph was captured.

    ``names``: module -> the name the capturing code reaches it by (``HostSnapshot.module_names``);
    a module not reached there is named by its class.
    """

    def __init__(self, journal: Journal, handles: HandleTable, names: dict[int, str]) -> None:
        self.journal, self.handles, self.names = journal, handles, names
        self.captured = False      # set at the first capture's end: before, no graph holds an address

    def graph_captured(self, graph: int) -> None:
        self.captured = True

    def on_rebind(self, owner: torch.nn.Module, attr: str, old: torch.Tensor, new: torch.Tensor) -> None:
        if not self.captured or old.device != new.device:
            return
        handles = self.handles
        self.journal.emit(Rebind, owner=self.names.get(id(owner), type(owner).__name__), attr=attr,
                          old_tensor=handles.handle(old).id, old_ptr=old.data_ptr(), old_nbytes=_nbytes(old),
                          new_tensor=handles.handle(new).id, new_ptr=new.data_ptr(), new_nbytes=_nbytes(new),
                          label=handles.label(old))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
