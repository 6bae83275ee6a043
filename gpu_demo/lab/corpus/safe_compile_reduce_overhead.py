"""Safe: a layer compiled with ``torch.compile(mode="reduce-overhead")``, served for a few steps.

A whole script, run as one (``CAPTURE_ORDER_CHECK=1``). Inductor's CUDA-graph
trees warm the compiled layer up, capture it and replay it, managing their
own pool and static inputs; the script only calls the compiled function, as
a user of ``reduce-overhead`` does.

The recorder steps aside while Dynamo compiles (``ignore_compile_internals``)
and records the compiled code as it runs, so the graph trees' own captures are
what the whole-process check checks. Inductor's generated Triton kernels are
launched by its own launcher, not ``JITFunction.run``, so they are not
recorded: the check sees the captures' aten ops.

Safe: every step matches eager; the checker must find nothing in the captures
the graph trees make.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN, STEPS = 16, 512, 6


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Call the compiled layer ``STEPS`` times on fresh inputs; the relative error of each step's
    output (copied out before the next step) against the eager layer."""
    w = torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5

    def layer(h: torch.Tensor) -> torch.Tensor:
        return h + F.silu(F.rms_norm(h, (HIDDEN,)) @ w)

    compiled = torch.compile(layer, mode="reduce-overhead")
    generator = torch.Generator().manual_seed(1)
    errors = []
    for _ in range(STEPS):
        h = torch.randn(TOKENS, HIDDEN, generator=generator).to(device, dtype)
        got = compiled(h).clone()
        errors.append(error(got, layer(h)))
    torch.cuda.synchronize()
    return errors
