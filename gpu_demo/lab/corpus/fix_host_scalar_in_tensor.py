"""Fix: the per-call host value lives in a device tensor the caller fills (vLLM #46913, SGLang #29508).

The twin of ``host_scalar_frozen``: the position the scale derives from is a
static device tensor the caller writes before each call (and before each
replay, like any input), and the scale is computed on the device from it. The
graph holds a kernel that reads the tensor, not a frozen float.

Safe: replays match eager, and no host number changes between calls.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)

    def forward(self, h: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        scale = 1.0 / (1.0 + 0.1 * step)   # computed on the device from the current step
        return h + F.silu(h @ self.w) * scale


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor, torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),
                                  torch.full((1,), 3.0, device=device, dtype=dtype))
