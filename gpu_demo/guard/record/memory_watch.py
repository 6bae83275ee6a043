"""Standing aside once a program serves: record only the calls that touch memory a rule follows.

Once a server has captured its graphs and serves, most of its eager work can
matter to no rule: sampling from a copied-out output, building the next batch.
What can matter touches graph memory: a read of a graph's live result (another
graph's replay may have clobbered it), a write into what a graph not yet
replayed reads (its static inputs, named at its first replay), a free of a
block a graph uses. A Python dispatch mode costs every op (about twice a small
op's own cost), so the recorder leaves the dispatch stack and this
``TorchFunctionMode`` stands at the bottom of the torch-function stack
instead: each Python-level call (``out.clone()``, ``static.copy_(x)``,
``torch.stack(outs)``) is checked against the watched ranges by its tensors'
pointers (and a storage's: a ``set_`` onto it makes a weak reference), and
only a call that touches one runs with the recorder back on the dispatch
stack, recorded op by op. Frees are judged by the allocator's report alone
(``Ranges.touches``), without any mode.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Iterable

import torch
from torch.overrides import TorchFunctionMode

from gpu_demo.guard.record import tensor_reads

_data_ptr, _numel, _itemsize = tensor_reads.data_ptr, tensor_reads.numel, tensor_reads.itemsize
_bisect_left = bisect.bisect_left
_Tensor, _Storage = torch.Tensor, torch.UntypedStorage
_GETTER = type(_Tensor.shape.__get__)   # what a property read (``x.shape``, ``x.dtype``) reaches the mode as
# Calls that read a tensor's metadata, never its memory: they pass at once (models make many).
_METADATA = frozenset(getattr(_Tensor, name) for name in (
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "element_size", "data_ptr",
    "is_contiguous", "is_floating_point", "is_complex", "get_device", "__len__"))


class Ranges:
    """Address ranges ``[lo, hi)``, merged, asked whether a span overlaps one of them."""

    def __init__(self, spans: Iterable[tuple[int, int]] = ()) -> None:
        merged: list[list[int]] = []
        for lo, hi in sorted((lo, max(hi, lo + 1)) for lo, hi in spans):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.los = [lo for lo, _ in merged]
        self.his = [hi for _, hi in merged]

    def __bool__(self) -> bool:
        return bool(self.los)

    def touches(self, ptr: int, nbytes: int) -> bool:
        i = bisect.bisect_left(self.los, ptr + max(nbytes, 1)) - 1
        return i >= 0 and self.his[i] > ptr

    def holds(self, ptr: int, nbytes: int) -> bool:
        """Does one range hold all of ``[ptr, ptr + nbytes)``?"""
        i = bisect.bisect_right(self.los, ptr) - 1
        return i >= 0 and self.his[i] >= ptr + nbytes


class MemoryWatch(TorchFunctionMode):
    """Runs each call through ``record`` when one of its tensors lies on watched memory.

    ``__torch_function__`` runs for every call a program makes: its common case (positional
    tensors, none on watched memory) is inlined, ``Ranges.touches`` included."""

    def __init__(self, record: Callable[[Callable[..., Any], tuple, dict], Any]) -> None:
        super().__init__()
        self.ranges = Ranges()
        self._record = record

    @property
    def ranges(self) -> Ranges:
        return self._ranges

    @ranges.setter
    def ranges(self, ranges: Ranges) -> None:
        self._ranges, self._los, self._his = ranges, ranges.los, ranges.his

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        if kwargs is None:
            kwargs = {}
        if type(func) is _GETTER or func in _METADATA:
            return func(*args, **kwargs)
        los = self._los
        if los:
            his = self._his
            for v in args:
                if isinstance(v, _Tensor):
                    try:
                        ptr = _data_ptr(v)
                    except RuntimeError:   # no storage (a tracing tensor): no memory to watch
                        continue
                    if ptr:
                        i = _bisect_left(los, ptr + (_numel(v) * _itemsize(v) or 1)) - 1
                        if i >= 0 and his[i] > ptr:
                            return self._record(func, args, kwargs)
                elif (type(v) is list or type(v) is tuple or type(v) is _Storage) and self._touched((v,)):
                    return self._record(func, args, kwargs)
            if kwargs and self._touched(kwargs.values()):
                return self._record(func, args, kwargs)
        return func(*args, **kwargs)

    def touched(self, named: Iterable[tuple[str, Any]]) -> bool:
        """Does one of a raw kernel's ``(name, value)`` arguments lie on watched memory?"""
        return bool(self._los) and self._touched(value for _, value in named)

    def _touched(self, values: Iterable[Any]) -> bool:
        ranges = self._ranges
        los, his = ranges.los, ranges.his
        for v in values:
            if isinstance(v, _Tensor):
                if _on(los, his, v):
                    return True
            elif type(v) is _Storage:   # ``t.set_(storage, ...)``: a weak reference made onto watched memory
                if ranges.touches(v.data_ptr(), v.nbytes()):
                    return True
            elif type(v) is list or type(v) is tuple:
                for t in v:
                    if isinstance(t, _Tensor) and _on(los, his, t):
                        return True
        return False


def _on(los: list[int], his: list[int], t: torch.Tensor) -> bool:
    """``Ranges.touches`` for ``t``'s bytes, inlined (``MemoryWatch.__torch_function__`` inlines it again)."""
    try:
        ptr = _data_ptr(t)
    except RuntimeError:   # no storage (a tracing tensor): no memory to watch
        return False
    if not ptr:
        return False
    i = _bisect_left(los, ptr + (_numel(t) * _itemsize(t) or 1)) - 1
    return i >= 0 and his[i] > ptr


def install_at_bottom(mode: TorchFunctionMode) -> None:
    """Put ``mode`` under every torch-function mode now active: modes the program entered stay
    above it and leave in their own order."""
    _restack(lambda modes: [mode, *modes])


def uninstall(mode: TorchFunctionMode) -> None:
    """Take ``mode`` out of the torch-function stack, wherever it stands (the recording ended)."""
    _restack(lambda modes: [m for m in modes if m is not mode])


def _restack(change: Callable[[list[TorchFunctionMode]], list[TorchFunctionMode]]) -> None:
    modes = [torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())][::-1]
    for m in change(modes):
        torch._C._push_on_torch_function_stack(m)
