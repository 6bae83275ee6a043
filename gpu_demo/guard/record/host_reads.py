"""See the host read a tensor's metadata: ``x.shape``, ``x.ndim``, ``x.size()``, ``x.numel()``, ``len(x)``, ``x.dim()``.

These reads never reach ``__torch_dispatch__`` (no kernel, no aten op). They
matter under capture: ``if x.shape[0] == 0: return`` after a host-side
``set_`` decides, once, what the graph will hold. ``HostReadWatch`` passes
each read to a callback that decides whether it is worth a record.

A read is only worth a record during a capture (of a tensor the capture
mutated, or whose storage changed under it since its last use), so a watch is
on only from a capture's beginning (``arm``) until its end (``disarm``). While any
watch is on, the six readers on ``torch.Tensor`` are wrappers that report the
read to every watch armed on the reading thread and call the original; the
last ``disarm`` puts the originals back, whatever order watches end in. A read
made while another is being reported or computed on the same thread
(``len(x)`` reads ``x.dim()`` and ``x.shape`` inside) is not reported. A
``TorchFunctionMode`` would see the same reads, but it would make every torch
call the program issues take a trip through Python, about as long as the
call itself; the wrappers cost the reads only.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Callable

import torch

# The readers watched, by attribute of ``torch.Tensor``, and the op name a record gets.
READERS = {"shape": "shape", "ndim": "ndim", "size": "size", "numel": "numel", "__len__": "len", "dim": "dim"}
_PROPERTIES = ("shape", "ndim")
_INHERITED = object()   # the attribute is ``torch._C.TensorBase``'s, not ``torch.Tensor``'s own

OnRead = Callable[[str, torch.Tensor], None]

_armed: list["HostReadWatch"] = []
_saved: dict[str, Any] = {}    # ``torch.Tensor``'s own attributes the wrappers replaced
_inside: set[int] = set()      # threads reporting or computing a read now


class HostReadWatch:
    """Reports metadata reads on the thread that armed it to ``on_read(op, tensor)``,
    between ``arm`` and ``disarm``. Disarmed it holds no callback (a recorder that owns
    one is no reference cycle)."""

    def __init__(self) -> None:
        self._on_read: OnRead | None = None
        self._thread: int | None = None

    @property
    def armed(self) -> bool:
        return self._on_read is not None

    def arm(self, on_read: OnRead) -> None:
        if self._on_read is not None:
            return
        self._on_read, self._thread = on_read, threading.get_ident()
        if not _armed:
            _wrap_readers()
        _armed.append(self)

    def disarm(self) -> None:
        if self._on_read is None:
            return
        _armed.remove(self)
        self._on_read = self._thread = None
        if not _armed:
            _unwrap_readers()


def _wrap_readers() -> None:
    for name, op in READERS.items():
        _saved[name] = torch.Tensor.__dict__.get(name, _INHERITED)
        setattr(torch.Tensor, name, _wrapped(op, inspect.getattr_static(torch.Tensor, name), name in _PROPERTIES))


def _unwrap_readers() -> None:
    for name, original in _saved.items():
        if original is _INHERITED:
            delattr(torch.Tensor, name)
        else:
            setattr(torch.Tensor, name, original)
    _saved.clear()


def _wrapped(op: str, original: Any, is_property: bool) -> Any:
    read = original.__get__ if is_property else original

    def reader(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        thread = threading.get_ident()
        watches = [w for w in _armed if w._thread == thread] if _armed and thread not in _inside else None
        if not watches:
            return read(t, *args, **kwargs)
        _inside.add(thread)
        try:
            for watch in watches:
                on_read = watch._on_read
                if on_read is not None:   # a callback may have disarmed a later watch
                    on_read(op, t)
            return read(t, *args, **kwargs)
        finally:
            _inside.discard(thread)

    return property(reader) if is_property else reader
