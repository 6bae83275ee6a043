"""Fix: one workspace for the layer's whole life (TensorRT-LLM #15534).

The twin of ``workspace_freed_in_capture``: the layer makes its workspace
once and keeps it, so the block the graph writes and reads stays the layer's
for as long as the graph may replay.

Safe: replays match eager, and nothing the graph uses is freed.
"""

import torch

EXPECTED = "safe"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.workspace = torch.empty(TOKENS, HIDDEN, device=device, dtype=dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        torch.matmul(h, self.w, out=self.workspace)
        return h + torch.relu(self.workspace)


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
