"""A buffer re-bound to a fresh copy every call (vLLM #11596: ``self.buffer = self.buffer.to(...)``).

The layer keeps a per-channel scale buffer and re-binds it on every call to a
converted copy of itself, ``self.buffer = self.buffer.to(h.device, h.dtype,
copy=True)``. Under capture the copy is a node that reads the buffer bound
when the capture began, and the re-binding drops that buffer's last
reference: its block, allocated before the capture, goes back to the
allocator while the graph still reads it. After the capture the allocator
hands it to whatever asks next, and each replay scales by whatever lives there.

Hazardous: the graph reads a block the program freed (checker rule 10,
``freed_under_graph``); the replays' output depends on who got the block.
"""

import torch
import torch.nn.functional as F

EXPECTED = "hazardous"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.buffer = torch.rand(HIDDEN, device=device, dtype=dtype) + 0.5

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        self.buffer = self.buffer.to(h.device, h.dtype, copy=True)   # re-bound: the old one is let go
        return h + F.silu(h @ self.w) * self.buffer


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
