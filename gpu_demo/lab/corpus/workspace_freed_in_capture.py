"""A per-call workspace let go inside the capture while the graph still uses it (TensorRT-LLM #15534).

The layer computes into a workspace made by the previous call and, at the
end of each call, makes the next call's, ``self.workspace = torch.empty_like(ws)``:
a per-call workspace, as in the thread. Under capture the graph's matmul
writes, and its add reads, the workspace made by the last warm-up call; the
re-binding drops its last reference during the capture, so its block,
allocated before the capture, goes back to the allocator while the graph uses
it. Every replay writes over whatever the allocator hands that block to next.

Hazardous: checker rule 10 (``freed_under_graph``) reports the free; the
replays overwrite memory the program no longer owns.
"""

import torch

EXPECTED = "hazardous"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.workspace = torch.empty(TOKENS, HIDDEN, device=device, dtype=dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        ws = self.workspace
        torch.matmul(h, self.w, out=ws)
        out = h + torch.relu(ws)
        self.workspace = torch.empty_like(ws)   # the next call's workspace; this one is let go
        return out


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
