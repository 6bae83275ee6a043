"""Tensor handles: host-side metadata pointing into a storage.

A ``TensorHandle`` is what a Python variable holds in PyTorch: a storage, an
offset and a shape. Its ``ptr`` is computed from them every time the host asks,
which is the whole point: ``set_`` repoints the handle on the host, no kernel
runs, and any launch *after* it reads the new pointer. An empty tensor has
pointer 0, like ``torch.empty(0, device="cuda").data_ptr()``.

Python's garbage collection is not modelled; ``release()`` is what ``del t``
does when it drops the last reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .allocator import Storage
from .stream import Stream
from .values import Expr

if TYPE_CHECKING:   # runtime imports tensor
    from .runtime import Runtime


class TensorHandle:
    """A tensor object on the host: (storage, offset, shape, itemsize)."""

    __slots__ = ("id", "label", "_shape", "numel", "offset", "itemsize", "storage", "_rt")

    def __init__(self, rt: "Runtime", id: int, label: str, storage: Storage,
                 shape: tuple[int, ...], offset: int = 0, itemsize: int = 2) -> None:
        self._rt = rt
        self.id = id
        self.label = label
        self.storage = storage
        self.shape = shape
        self.offset = offset
        self.itemsize = itemsize

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @shape.setter
    def shape(self, shape: tuple[int, ...]) -> None:
        self._shape = shape
        self.numel = math.prod(shape)   # cached: launches read it on every argument

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def ptr(self) -> int:
        """The address a launch would read *now* (0 for an empty storage)."""
        if self.storage.nbytes == 0:
            return 0
        return self.storage.ptr + self.offset * self.itemsize

    def data_ptr(self) -> int:
        return self.ptr

    # Host operations, forwarded to the runtime so they are timed and traced.
    def set_(self, source: "TensorHandle | None" = None) -> "TensorHandle":
        """Repoint this handle at ``source``'s storage; ``None`` means empty."""
        return self._rt.set_(self, source)

    def resize_(self, *shape: int) -> "TensorHandle":
        return self._rt.resize_(self, tuple(shape))

    def view(self, *shape: int, offset: int = 0, label: str | None = None) -> "TensorHandle":
        return self._rt.view(self, tuple(shape), offset=offset, label=label)

    def clone(self, label: str | None = None) -> "TensorHandle":
        return self._rt.clone(self, label=label)

    def copy_(self, src: "TensorHandle") -> "TensorHandle":
        return self._rt.copy_(self, src)

    def item(self) -> Expr:
        return self._rt.item(self)

    def untyped_storage(self) -> "UntypedStorage":
        """The storage this handle (and every view of it) points into."""
        return UntypedStorage(self)

    def record_stream(self, stream: Stream) -> None:
        """Tell the caching allocator that ``stream`` uses this tensor's block."""
        self._rt.record_stream(self, stream)

    def release(self) -> None:
        self._rt.release(self)

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape)) or "scalar"
        return f"<TensorHandle {self.label!r} [{shape}] ptr={hex(self.ptr)}>"


@dataclass(frozen=True)
class UntypedStorage:
    """``t.untyped_storage()``: the block behind ``t``, shared by all its views."""

    tensor: TensorHandle

    def nbytes(self) -> int:
        return self.tensor.storage.nbytes

    def data_ptr(self) -> int:
        return self.tensor.storage.ptr if self.tensor.storage.nbytes else 0

    def resize_(self, nbytes: int) -> "UntypedStorage":
        """``resize_(0)`` frees the block while every tensor on it keeps its shape."""
        self.tensor._rt.resize_storage_(self.tensor, nbytes)
        return self


@dataclass(frozen=True)
class RawArg:
    """A raw pointer passed to a kernel with a size that does not come from the tensor.

    Models a hand-written kernel (Triton, CUDA) that takes ``x.data_ptr()`` and
    a size fixed by the static batch: it launches even when ``x`` is empty.
    """

    tensor: TensorHandle
    numel: int


def raw(tensor: TensorHandle, numel: int) -> RawArg:
    """Pass ``tensor``'s pointer with a static element count ``numel``."""
    if numel < 0:
        raise ValueError(f"raw(): numel={numel} must be >= 0")
    return RawArg(tensor, numel)
