"""Triton kernels behind ``gpu_demo.lab.moe.kernels`` (imported only on a GPU).

``raw_load`` reads through whatever pointer it is given: Triton's launcher
accepts a null pointer, so a disposed input (``data_ptr() == 0``) is captured
as address 0 and the kernel faults when the graph replays.

``residual_add`` is launched with ``launch_pdl=True`` (Programmatic Dependent
Launch, Hopper and later) and calls ``gdc_wait()`` before its first load: it may
be scheduled while the previous kernel on its stream drains, and waits on the
device, not the host, for that kernel's writes. With ``pdl=False`` the same
kernel launches the ordinary way (``gdc_wait()`` then returns at once), which
separates what PDL saves from what fusing the adds saves.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _raw_load_kernel(src_ptr, dst_ptr, numel, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


def raw_load(x: torch.Tensor, out: torch.Tensor, numel: int) -> None:
    """Copy ``numel`` elements starting at ``x.data_ptr()`` into ``out``."""
    _raw_load_kernel[(triton.cdiv(numel, BLOCK),)](x, out, numel, BLOCK=BLOCK)


@triton.jit
def _residual_add_kernel(res_ptr, a_ptr, b_ptr, out_ptr, numel, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    tl.extra.cuda.gdc_wait()
    res = tl.load(res_ptr + offsets, mask=mask).to(tl.float32)
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (res + a + b).to(out_ptr.dtype.element_ty), mask=mask)


def residual_add(residual: torch.Tensor, routed: torch.Tensor, shared: torch.Tensor,
                 pdl: bool = True) -> torch.Tensor:
    """``residual + routed + shared`` in one kernel, PDL-launched unless ``pdl=False``."""
    out = torch.empty_like(residual)
    numel = out.numel()
    _residual_add_kernel[(triton.cdiv(numel, BLOCK),)](
        residual, routed, shared, out, numel, BLOCK=BLOCK, launch_pdl=pdl
    )
    return out
