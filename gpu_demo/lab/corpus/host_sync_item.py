"""A host read of a device value inside the layer: ``.item()``.

A single-stream layer that scales its input by its largest magnitude, read
back to the host with ``.item()`` (a habit from eager code: a Python float to
log or to branch on).

Hazardous: ``.item()`` waits for the device, which a capturing stream forbids;
the capture fails (``capture_error:cudaErrorStreamCaptureUnsupported`` or
``...Invalidated``). Eagerly it is merely slow.
"""

import torch

EXPECTED = "hazardous"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        scale = h.abs().amax().item()  # a Python float: the host waits for the device
        return h + (h / scale) @ self.w


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
