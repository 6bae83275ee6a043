"""Safe: a dual-stream layer with a correct fork and join and no early free.

Under capture the shared branch runs on a side stream after
``alt.wait_stream(main)``, the routed branch on the current stream, and the
current stream waits for the side stream (``main.wait_stream(alt)``) before it
merges the two. Nothing is freed or emptied on the host, and each stream
writes only its own outputs.

Safe: replays match eager; the checker finds nothing.
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

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = F.rms_norm(h, (HIDDEN,))
        if self.alt is not None and torch.cuda.is_current_stream_capturing():
            main = torch.cuda.current_stream()
            self.alt.wait_stream(main)
            with torch.cuda.stream(self.alt):
                shared = F.silu(x @ self.w_shared)
            routed = F.silu(x @ self.w_routed)
            main.wait_stream(self.alt)
        else:
            shared = F.silu(x @ self.w_shared)
            routed = F.silu(x @ self.w_routed)
        return h + routed + shared


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
