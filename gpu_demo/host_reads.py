"""See the host read a tensor's metadata: ``x.shape``, ``x.size()``, ``x.numel()``, ``len(x)``, ``x.dim()``.

These reads never reach ``__torch_dispatch__`` (no kernel, no aten op), but
they go through ``__torch_function__``, so a ``TorchFunctionMode`` sees them.
They matter under capture: ``if x.shape[0] == 0: return`` after a host-side
``set_`` decides, once, what the graph will hold. ``HostReadMode`` passes each
read to a callback that decides whether it is worth a record.

A torch-function mode costs every torch call the program makes a trip through
Python (about as much as the call itself), and a read is only worth a record
once a capture has mutated a tensor. So ``HostReadWatch`` puts the mode on the
torch-function stack only from then (``arm``) until the capture ends
(``disarm``); the rest of the run pays nothing.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

METADATA_READS: dict[Any, str] = {
    torch.Tensor.shape.__get__: "shape",
    torch.Tensor.ndim.__get__: "ndim",
    torch.Tensor.size: "size",
    torch.Tensor.numel: "numel",
    torch.Tensor.__len__: "len",
    torch.Tensor.dim: "dim",
}


class HostReadMode(TorchFunctionMode):
    """Calls ``on_read(op, tensor)`` for each metadata read the program makes inside."""

    def __init__(self, on_read: Callable[[str, torch.Tensor], None]) -> None:
        super().__init__()
        self._on_read = on_read

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        try:
            op = METADATA_READS.get(func)
        except TypeError:  # an unhashable callable is no metadata read
            op = None
        if op is not None and args and isinstance(args[0], torch.Tensor):
            self._on_read(op, args[0])
        return func(*args, **(kwargs or {}))


class HostReadWatch:
    """A ``HostReadMode`` on the torch-function stack only between ``arm`` and ``disarm``.

    Modes pushed after it may still be there at ``disarm`` (a program's own
    mode entered during the capture); they stay, in their order. Disarmed, it
    holds no callback (a recorder that owns one is no reference cycle).
    """

    def __init__(self) -> None:
        self._mode: HostReadMode | None = None

    @property
    def armed(self) -> bool:
        return self._mode is not None

    def arm(self, on_read: Callable[[str, torch.Tensor], None]) -> None:
        if self._mode is None:
            self._mode = HostReadMode(on_read)
            torch._C._push_on_torch_function_stack(self._mode)

    def disarm(self) -> None:
        armed, self._mode = self._mode, None
        if armed is None:
            return
        above = []
        while torch._C._len_torch_function_stack():
            mode = torch._C._pop_torch_function_stack()
            if mode is armed:
                break
            above.append(mode)
        for mode in reversed(above):
            torch._C._push_on_torch_function_stack(mode)
