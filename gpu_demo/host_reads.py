"""See the host read a tensor's metadata: ``x.shape``, ``x.ndim``, ``x.size()``, ``x.numel()``, ``len(x)``, ``x.dim()``.

These reads never reach ``__torch_dispatch__`` (no kernel, no aten op). They
matter under capture: ``if x.shape[0] == 0: return`` after a host-side
``set_`` decides, once, what the graph will hold. ``HostReadWatch`` passes
each read to a callback that decides whether it is worth a record.

A read is only worth a record once a capture has mutated a tensor, so the
watch is on only from then (``arm``) until the capture ends (``disarm``).
While on, it replaces those six readers on ``torch.Tensor`` with wrappers that
report the read and call the original; only reads on the thread that armed it
are reported, and a read made while another is being reported or computed
(``len(x)`` reads ``x.dim()`` and ``x.shape`` inside) is not. A
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


class HostReadWatch:
    """Reports metadata reads to ``on_read(op, tensor)`` between ``arm`` and ``disarm``.

    Disarmed, ``torch.Tensor`` is exactly as it was and the watch holds no
    callback (a recorder that owns one is no reference cycle).
    """

    def __init__(self) -> None:
        self._on_read: OnRead | None = None
        self._thread: int | None = None
        self._inside = False
        self._saved: dict[str, Any] = {}

    @property
    def armed(self) -> bool:
        return self._on_read is not None

    def arm(self, on_read: OnRead) -> None:
        if self._on_read is not None:
            return
        self._on_read, self._thread = on_read, threading.get_ident()
        for name, op in READERS.items():
            self._saved[name] = torch.Tensor.__dict__.get(name, _INHERITED)
            setattr(torch.Tensor, name, self._wrapped(op, inspect.getattr_static(torch.Tensor, name),
                                                      name in _PROPERTIES))

    def disarm(self) -> None:
        if self._on_read is None:
            return
        for name, original in self._saved.items():
            if original is _INHERITED:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)
        self._saved.clear()
        self._on_read = self._thread = None

    def _wrapped(self, op: str, original: Any, is_property: bool) -> Any:
        read = original.__get__ if is_property else original
        watch = self

        def reader(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if watch._inside or watch._on_read is None or threading.get_ident() != watch._thread:
                return read(t, *args, **kwargs)
            watch._inside = True
            try:
                watch._on_read(op, t)
                return read(t, *args, **kwargs)
            finally:
                watch._inside = False

        return property(reader) if is_property else reader
