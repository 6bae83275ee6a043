"""The recorder's own reads of a tensor's metadata, and the bytes a tensor spans.

They go to ``torch._C.TensorBase`` directly: an armed ``HostReadWatch``
(``gpu_demo.record.host_reads``) wraps ``torch.Tensor``'s readers to see the
program's shape reads, and the recorder's reads are not the program's. Going
around ``torch.Tensor`` also skips torch-function modes, which the recorder's
reads must never reach.
"""

from __future__ import annotations

import torch

data_ptr = torch._C.TensorBase.data_ptr
numel = torch._C.TensorBase.numel
shape = torch._C.TensorBase.shape.__get__
stride = torch._C.TensorBase.stride
contiguous = torch._C.TensorBase.is_contiguous
itemsize = torch._C.TensorBase.element_size


def extent_bytes(t: torch.Tensor) -> int:
    """The bytes ``t`` can touch from its data pointer (``Arg.nbytes``): 0 without elements, else
    ``(1 + sum((size_i - 1) * stride_i)) * itemsize``. Not ``numel * itemsize``: an expanded
    (stride 0) view has more elements than bytes behind it, a strided one spans more bytes."""
    if contiguous(t):
        return numel(t) * itemsize(t)
    last = 0
    for size, step in zip(shape(t), stride(t)):
        if not size:
            return 0
        last += (size - 1) * step
    return (last + 1) * itemsize(t)
