"""Rotary tables sliced by a host position, ``cos[pos:pos + n]`` (transformers #45274).

A decode step rotates this step's tokens by the rotary tables of their
positions, slicing the tables at the sequence length, which the host tracks
as a Python int that grows every step (the thread's ``n =
int(lengths_cpu[0])``; Meta's reference Llama slices ``freqs_cis[start_pos:
start_pos + seqlen]`` alike, a nanoGPT-style cache indexes by ``self.pos``).
A slice is host metadata: the pointer, sizes and strides a launch gets are
read on the host, like a scalar, and a graph keeps those of the capture's
call. Every replay rotates by the capture's positions, however long the
sequence has grown.

Hazardous: replays rotate by the wrong positions (``silent_wrong``); checker
rule 15 (``view_frozen``) sees the tables' views start elsewhere in each
warm-up call, and rule 16 (``host_state_branch``) warns that the length
changed during the capture.
"""

import torch

EXPECTED = "hazardous"
TOKENS, HIDDEN, MAX_LEN, START = 4, 256, 64, 8


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class Rotary(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        angles = torch.arange(MAX_LEN, device=device)[:, None] / 10_000 ** (
            torch.arange(HIDDEN, device=device) % (HIDDEN // 2) / (HIDDEN // 2))
        self.register_buffer("cos", angles.cos().to(dtype))
        self.register_buffer("sin", angles.sin().to(dtype))
        self.length = START

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.length = START + (self.length - START + TOKENS) % (MAX_LEN - START - TOKENS)   # the tokens so far
        pos = self.length
        cos, sin = self.cos[pos:pos + TOKENS], self.sin[pos:pos + TOKENS]   # views at a host offset
        return x * cos + rotate_half(x) * sin


def make(device: torch.device, dtype: torch.dtype) -> tuple[Rotary, tuple[torch.Tensor]]:
    return Rotary(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
