"""Fix: the positions live in a device tensor the graph reads, and the tables are gathered by it
(transformers #45274).

The twin of ``view_sliced_by_host_length``: each token's position comes from
a device tensor the caller fills before every call and replay (a static
input, like ``cache_position``), and the rotary tables are gathered with it
(``index_select``). The tensors a launch gets are the same in every call;
what changes is data the graph reads.

Safe: replays rotate by each token's current position, as eager does.
"""

import torch

EXPECTED = "safe"
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

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)   # on the device
        return x * cos + rotate_half(x) * sin


def make(device: torch.device, dtype: torch.dtype) -> tuple[Rotary, tuple[torch.Tensor, torch.Tensor]]:
    positions = torch.arange(START, START + TOKENS, device=device)   # fresh positions keep within them
    return Rotary(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype), positions)
