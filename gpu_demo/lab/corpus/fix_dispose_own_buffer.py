"""Fix: dispose only the buffer the branch owns (routed first, raw Triton kernel).

The incident's layer with the raw-kernel shared branch, routed branch still
issued first, but the routed branch frees only its own pre-permute copy, after
its last use, and never touches ``x``. The shared branch's kernel freezes the
real ``x``. The freed copy's block may be handed out again during capture, but
only the current stream ever used it, so stream order covers the reuse.

Safe: replays match eager.
"""

import functools

import torch
import torch.nn.functional as F

try:  # Triton exists on GPU machines only; this file must import without it
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None

EXPECTED = "safe"
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
        y = permuted @ self.w_routed
        permuted.set_(torch.empty((0,), device=x.device, dtype=x.dtype))  # dispose_tensor(permuted): ours
        return y.flip(0)

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
