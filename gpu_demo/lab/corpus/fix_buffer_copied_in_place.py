"""Fix: the buffer updated in place, never re-bound (vLLM #11596).

The twin of ``buffer_rebound``: the layer converts the scale into one buffer
it owns for its whole life, ``self.buffer.copy_(self.source)``, so the object
the graph reads is never let go, and each replay rewrites it in place.

Safe: replays match eager, and nothing the graph uses is freed.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.source = torch.rand(HIDDEN, device=device, dtype=dtype) + 0.5
        self.buffer = torch.empty(HIDDEN, device=device, dtype=dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        self.buffer.copy_(self.source)   # in place: the graph's buffer stays the program's
        return h + F.silu(h @ self.w) * self.buffer


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
