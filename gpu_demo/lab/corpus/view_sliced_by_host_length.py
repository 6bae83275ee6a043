"""Attention over a static KV cache sliced by a host length, ``cache[:n]`` (transformers #45274).

A decode layer attends over a static KV cache up to the sequence length, which
the host tracks as a Python int that grows by one every step (the thread's
``n = int(lengths_cpu[0])``; a nanoGPT-style cache's ``self.pos``), and slices
the cache with it. A slice is host metadata: the pointer, sizes and strides
a launch gets are read on the host, like a scalar, and a graph keeps those of
the capture's call. Every replay attends over the capture's number of
positions, however long the sequence has grown.

Hazardous: replays attend over the wrong prefix (``silent_wrong``); checker
rule 15 (``view_frozen``) sees the cache's view take another size in each
warm-up call.
"""

import torch

EXPECTED = "hazardous"
TOKENS, HIDDEN, MAX_LEN, START = 4, 256, 64, 8


class Attention(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("k_cache", torch.randn(MAX_LEN, HIDDEN, device=device, dtype=dtype))
        self.register_buffer("v_cache", torch.randn(MAX_LEN, HIDDEN, device=device, dtype=dtype))
        self.length = START

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        self.length = START + (self.length - START + 1) % (MAX_LEN - START)   # one more token every step
        n = self.length
        k, v = self.k_cache[:n], self.v_cache[:n]     # views a host int sizes
        return torch.softmax(q @ k.T / HIDDEN**0.5, dim=-1) @ v


def make(device: torch.device, dtype: torch.dtype) -> tuple[Attention, tuple[torch.Tensor]]:
    return Attention(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
