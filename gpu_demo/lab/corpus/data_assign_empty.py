"""Routed branch first, ``x`` emptied by ``x.data = torch.empty(0, ...)``, shared branch behind a shape guard.

The SGLang incident's layer with the disposal DeepSpeed-style code uses to
free a tensor early, ``x.data = torch.empty(0, ...)`` (DeepSpeed's ZeRO-3
partitioning frees parameters this way). No aten op runs: autograd swaps the
tensor's storage directly, and no dispatch mode sees it. Under capture the
routed branch is issued first and frees ``x``; the shared branch then finds
no rows, skips its matmul and returns its static buffer.

Hazardous: the graph holds no node for the shared branch (``silent_wrong``);
the recorder sees the storage change under ``x`` between two uses
(``storage_swap``) and checker rules 1 and 2 explain it.
"""

import torch
import torch.nn.functional as F

EXPECTED = "hazardous"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w_routed", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("w_shared", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("out", torch.zeros(TOKENS, HIDDEN, device=device, dtype=dtype))
        self.alt = torch.cuda.Stream(device) if device.type == "cuda" else None

    def routed(self, x: torch.Tensor) -> torch.Tensor:
        permuted = x.flip(0)  # the pre-permute copy
        x.data = torch.empty(0, device=x.device, dtype=x.dtype)  # DeepSpeed-style free: no aten op runs
        return (permuted @ self.w_routed).flip(0)

    def shared(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 0:  # no tokens: nothing to compute
            return self.out
        torch.matmul(x, self.w_shared, out=self.out)
        return self.out

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = F.rms_norm(h, (HIDDEN,))
        if self.alt is not None and torch.cuda.is_current_stream_capturing():
            main = torch.cuda.current_stream()
            self.alt.wait_stream(main)
            routed = self.routed(x)
            with torch.cuda.stream(self.alt):
                shared = self.shared(x)
            main.wait_stream(self.alt)
        else:
            shared = self.shared(x)
            routed = self.routed(x)
        return h + routed + shared


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
