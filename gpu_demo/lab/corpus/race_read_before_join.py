"""A cross-stream race, no dispose: the current stream reads the side stream's output before the join.

A gated MLP that computes its gate on a side stream to overlap it with the up
projection, and multiplies by the gate on the current stream *before*
``main.wait_stream(alt)``; the join comes only at the end, so the capture is
legal. Nothing is freed or emptied on the host.

Hazardous: in the graph no edge orders the side stream's write of ``gate``
before the current stream's read of it (checker rule 3, cross_stream_race). A
replay in which the read wins uses the previous replay's gate: silently wrong,
or correct only by timing (``unordered``).
"""

import torch

EXPECTED = "hazardous"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w_gate", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("w_up", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.alt = torch.cuda.Stream(device) if device.type == "cuda" else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.alt is not None and torch.cuda.is_current_stream_capturing():
            main = torch.cuda.current_stream()
            self.alt.wait_stream(main)
            with torch.cuda.stream(self.alt):
                gate = torch.sigmoid(h @ self.w_gate)
            out = (h @ self.w_up) * gate  # reads gate before main.wait_stream(alt)
            main.wait_stream(self.alt)
        else:
            out = (h @ self.w_up) * torch.sigmoid(h @ self.w_gate)
        return h + out


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
