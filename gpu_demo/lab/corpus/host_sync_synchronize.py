"""A device-wide sync inside the layer: ``torch.cuda.synchronize()``.

A single-stream layer with a ``torch.cuda.synchronize()`` left in its forward
(to time a step, or to "make sure" a result is ready before it is used).

Hazardous: synchronising the device while a stream captures is not permitted;
the capture fails (``capture_error:cudaErrorStreamCaptureUnsupported`` or
``...Invalidated``).
"""

import torch

EXPECTED = "hazardous"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w_up", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("w_down", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        up = torch.relu(h @ self.w_up)
        if up.is_cuda:
            torch.cuda.synchronize()  # "make sure up is ready"
        return h + up @ self.w_down


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
