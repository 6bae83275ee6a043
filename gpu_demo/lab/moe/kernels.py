"""The layer's fused ops, each one launch as the host sees it.

Serving engines call fused kernels that take raw pointers and sizes; this lab
needs three of them, registered as torch custom ops so that they go through
the dispatcher (the recorder sees them with their tensor arguments) and so
that the same call runs on a CPU (torch code) and on a GPU (Triton or torch):

``shared_expert_into(x, w_gate_up, w_down, out)``
    The shared SwiGLU expert writing into a static buffer ``out``. Like the
    fused kernels of serving engines it returns without doing anything when
    ``x`` has no rows (``if x.shape[0] > 0``), so ``out`` keeps what it held.
``raw_load(x, out, numel)``
    Copy ``numel`` elements from ``x``'s raw data pointer into ``out``. The size
    comes from the static batch, not from ``x``: a kernel that trusts the
    pointer. On a GPU it is a Triton kernel, which accepts a null pointer and
    faults on the device. A CPU cannot fault on the device, so its version
    reads the elements that exist and leaves the rest of ``out`` as it was.
``residual_add(residual, routed, shared)``
    ``residual + routed + shared`` summed in float32; on a GPU a Triton kernel
    launched with Programmatic Dependent Launch (PDL), so it may start while
    the kernel before it on its stream finishes (``without_pdl()`` launches the
    same kernel the ordinary way, for the benchmark).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F

from gpu_demo.guard.record import annotate


def swiglu(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """SwiGLU MLP: ``down(silu(gate(x)) * up(x))`` with gate and up fused in one GEMM."""
    gate, up = F.linear(x, w_gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w_down)


@torch.library.custom_op("gpu_demo::shared_expert_into", mutates_args=("out",))
def shared_expert_into(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, out: torch.Tensor) -> None:
    if x.shape[0] > 0:
        out.copy_(swiglu(x, w_gate_up, w_down))


@torch.library.custom_op("gpu_demo::raw_load", mutates_args=("out",))
def raw_load(x: torch.Tensor, out: torch.Tensor, numel: int) -> None:
    available = min(numel, x.numel(), out.numel())
    out.view(-1)[:available].copy_(x.reshape(-1)[:available])


@raw_load.register_kernel("cuda")
def _raw_load_cuda(x: torch.Tensor, out: torch.Tensor, numel: int) -> None:
    from gpu_demo.lab.moe import triton_kernels

    triton_kernels.raw_load(x, out, numel)


@torch.library.custom_op("gpu_demo::residual_add", mutates_args=())
def residual_add(residual: torch.Tensor, routed: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    return (residual.float() + routed.float() + shared.float()).to(residual.dtype)


_launch_with_pdl = [True]


@contextmanager
def without_pdl() -> Iterator[None]:
    """Launch the fused residual add without PDL inside (read at launch, so at capture)."""
    _launch_with_pdl.append(False)
    try:
        yield
    finally:
        _launch_with_pdl.pop()


@residual_add.register_kernel("cuda")
def _residual_add_cuda(residual: torch.Tensor, routed: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    from gpu_demo.lab.moe import triton_kernels

    return triton_kernels.residual_add(residual, routed, shared, pdl=_launch_with_pdl[-1])


annotate.launches_with_pdl("gpu_demo.residual_add.default")
"""Ops (by their dispatcher name) whose GPU kernel is launched with PDL."""
