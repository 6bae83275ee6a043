"""Safe: a single-stream SwiGLU MLP layer with static shapes.

RMS norm, a fused gate-up projection, SiLU gate, down projection and the
residual add, all on the current stream. No host syncs, no host-side changes
of tensor metadata, no second stream.

Safe: replays match eager; the checker finds nothing.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN, INTERMEDIATE = 16, 512, 1024


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w_gate_up", torch.randn(HIDDEN, 2 * INTERMEDIATE, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("w_down", torch.randn(INTERMEDIATE, HIDDEN, device=device, dtype=dtype) / INTERMEDIATE**0.5)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        gate, up = (F.rms_norm(h, (HIDDEN,)) @ self.w_gate_up).chunk(2, dim=-1)
        return h + (F.silu(gate) * up) @ self.w_down


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
