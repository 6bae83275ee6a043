"""Positions rebuilt from host data into a fresh tensor every call (FlashInfer #3904, vLLM #48167, SGLang #26019).

A decode layer builds its positions from host metadata on each call, the
way the threads' plan and metadata buffers were rebuilt every step:
``torch.tensor(positions).pin_memory().to("cuda", non_blocking=True)``. Under
capture that host-to-device copy becomes a graph node that copies from the
pinned host buffer of the capture's call; the new tensor of each later call
never reaches the graph.

Hazardous: every replay gathers the capture's positions (``silent_wrong``);
checker rule 9 (``input_rebuilt``) sees a different freshly copied tensor at
that argument in each warm-up call.
"""

import torch

EXPECTED = "hazardous"
TOKENS, HIDDEN, MAX_POSITIONS = 16, 512, 4096


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(MAX_POSITIONS, HIDDEN, device=device, dtype=dtype))
        self.step = 0

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        self.step += TOKENS
        positions = [(self.step + i) % MAX_POSITIONS for i in range(TOKENS)]   # host metadata of this step
        host = torch.tensor(positions)
        if h.is_cuda:
            host = host.pin_memory()
        pos = host.to(h.device, non_blocking=True)   # a fresh device tensor every call
        return h + self.table[pos]


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
