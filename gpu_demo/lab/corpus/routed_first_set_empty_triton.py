"""Routed branch first, ``x`` emptied by ``set_``, shared branch reads ``x`` with a raw Triton kernel.

The dual-stream layer of the SGLang incident, with a shared branch that stages
its input through a hand-written ``@triton.jit`` kernel sized by the static
batch (``TOKENS * HIDDEN`` elements), as fused kernels often are. Under capture
the routed branch is issued first and frees ``x`` with
``x.set_(torch.empty((0,)))``, so the kernel is launched with ``x.data_ptr() == 0``;
Triton's launcher accepts the null pointer.

Hazardous: the graph holds a node whose frozen pointer is 0; the first replay
faults (``illegal_address``, and the process's CUDA context is lost).
"""

import functools

import torch
import torch.nn.functional as F

try:  # Triton exists on GPU machines only; this file must import without it
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None

EXPECTED = "hazardous"
RUNS_ON_CPU = False  # the Triton kernel needs a GPU
TOKENS, HIDDEN = 16, 512


@functools.cache
def _copy_kernel():
    @triton.jit
    def copy(src, dst, numel, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < numel
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)

    return copy


def copy_raw(src: torch.Tensor, dst: torch.Tensor, numel: int) -> None:
    """Copy ``numel`` elements from ``src``'s address into ``dst`` (no shape check)."""
    if triton is None or not dst.is_cuda:
        raise RuntimeError("copy_raw is a Triton kernel: it needs triton and a CUDA device")
    _copy_kernel()[(triton.cdiv(numel, 1024),)](src, dst, numel, BLOCK=1024)


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w_routed", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("w_shared", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("staged", torch.zeros(TOKENS, HIDDEN, device=device, dtype=dtype))
        self.alt = torch.cuda.Stream(device) if device.type == "cuda" else None

    def routed(self, x: torch.Tensor) -> torch.Tensor:
        permuted = x.flip(0)  # the pre-permute copy
        x.set_(torch.empty((0,), device=x.device, dtype=x.dtype))  # dispose_tensor(x): free it early
        return (permuted @ self.w_routed).flip(0)

    def shared(self, x: torch.Tensor) -> torch.Tensor:
        copy_raw(x, self.staged, TOKENS * HIDDEN)  # sized by the static batch
        return self.staged @ self.w_shared

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = F.rms_norm(h, (HIDDEN,))
        if self.alt is not None and torch.cuda.is_current_stream_capturing():
            main = torch.cuda.current_stream()
            self.alt.wait_stream(main)
            routed = self.routed(x)
            with torch.cuda.stream(self.alt):
                shared = self.shared(x)
            main.wait_stream(self.alt)
        else:
            shared = self.shared(x)
            routed = self.routed(x)
        return h + routed + shared


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
