"""Fix: the sequence lengths live in a device tensor, and attention masks past them (transformers #45274).

The twin of ``view_sliced_by_host_length``: attention reads the whole static
cache and each query's length from a device tensor the caller fills before
every call and replay (a static input, like ``cache_position``), and masks the
positions past it. The views a launch gets are the same in every call; what
changes is data the graph reads.

Safe: replays attend over each query's current prefix, as eager does.
"""

import torch

EXPECTED = "safe"
TOKENS, HIDDEN, MAX_LEN, START = 4, 256, 64, 8


class Attention(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("k_cache", torch.randn(MAX_LEN, HIDDEN, device=device, dtype=dtype))
        self.register_buffer("v_cache", torch.randn(MAX_LEN, HIDDEN, device=device, dtype=dtype))
        self.register_buffer("positions", torch.arange(MAX_LEN, device=device))

    def forward(self, q: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        scores = q @ self.k_cache.T / HIDDEN**0.5
        past = self.positions[None, :] >= lengths[:, None]   # each query's positions past its length
        return torch.softmax(scores.masked_fill(past, float("-inf")), dim=-1) @ self.v_cache


def make(device: torch.device, dtype: torch.dtype) -> tuple[Attention, tuple[torch.Tensor, torch.Tensor]]:
    lengths = torch.linspace(START, MAX_LEN, TOKENS, device=device).long()   # fresh lengths keep within it
    return Attention(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype), lengths)
