"""A missing join: the side stream's work never rejoins the capturing stream.

The dual-stream layer forks correctly (``alt.wait_stream(main)``) but forgets
``main.wait_stream(alt)`` after the shared branch, and merges anyway.

Hazardous: a capture must end with every forked stream joined back, so it
fails (``capture_error:cudaErrorStreamCaptureUnjoined``); the merge's read of
the shared result is also unordered.
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
        self.alt = torch.cuda.Stream(device) if device.type == "cuda" else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = F.rms_norm(h, (HIDDEN,))
        if self.alt is not None and torch.cuda.is_current_stream_capturing():
            main = torch.cuda.current_stream()
            self.alt.wait_stream(main)
            with torch.cuda.stream(self.alt):
                shared = x @ self.w_shared
            routed = x @ self.w_routed  # BUG: main never waits for alt (no join)
        else:
            shared = x @ self.w_shared
            routed = x @ self.w_routed
        return h + routed + shared


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
