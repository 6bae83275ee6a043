"""Fix: positions copied into one static buffer the graph reads (FlashInfer #3904, vLLM #48167, SGLang #26019).

The twin of ``input_rebuilt_each_call``: the caller copies each step's
positions into one static device buffer before the call (before each replay:
``static.copy_(new, non_blocking=True)`` outside the graph), and the layer
reads that buffer. No tensor is built from host data inside the captured call.

Safe: replays match eager.
"""

import torch

EXPECTED = "safe"
TOKENS, HIDDEN, MAX_POSITIONS = 16, 512, 4096


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(MAX_POSITIONS, HIDDEN, device=device, dtype=dtype))

    def forward(self, h: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return h + self.table[positions]


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor, torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),
                                  torch.arange(MAX_POSITIONS - TOKENS, MAX_POSITIONS, device=device))
