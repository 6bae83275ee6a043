"""A missing fork: the side stream starts work without waiting on the capturing stream.

The dual-stream layer forgets ``alt.wait_stream(main)``: its shared branch is
issued on a side stream that never joined the capture, although it reads ``x``,
which the capturing stream has just written.

Hazardous: the side stream is not capturing, so its launch runs for real
during the capture and CUDA refuses it; the capture fails
(``capture_error:cudaErrorStreamCaptureUnsupported`` or ``...Isolation``).
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
            with torch.cuda.stream(self.alt):  # BUG: alt never waited for main (no fork)
                shared = x @ self.w_shared
            routed = x @ self.w_routed
            main.wait_stream(self.alt)
        else:
            shared = x @ self.w_shared
            routed = x @ self.w_routed
        return h + routed + shared


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
