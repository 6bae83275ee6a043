"""Fix: never dispose (routed first, plain torch ops).

The incident's layer with a plain-torch shared branch, routed branch issued
first, and no early free at all: ``x`` lives until the layer returns. It costs
the memory the dispose would have saved, for the duration of one layer.

Safe: replays match eager.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w_routed", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("w_shared", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.alt = torch.cuda.Stream(device) if device.type == "cuda" else None

    def routed(self, x: torch.Tensor) -> torch.Tensor:
        permuted = x.flip(0)  # the pre-permute copy
        return (permuted @ self.w_routed).flip(0)

    def shared(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w_shared

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
