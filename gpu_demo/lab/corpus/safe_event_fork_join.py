"""Safe: a dual-stream layer forked and joined with explicit ``torch.cuda.Event``s.

Like ``safe_dual_stream``, but the fork and the join are an event recorded on
one stream and waited on by the other (``event.record(main)``,
``alt.wait_event(event)``), the form hand-tuned kernels' runners use instead
of ``wait_stream``.

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
        if self.alt is None:
            return h + F.silu(x @ self.w_routed) + F.silu(x @ self.w_shared)
        main = torch.cuda.current_stream()
        forked, joined = torch.cuda.Event(), torch.cuda.Event()
        forked.record(main)
        self.alt.wait_event(forked)
        with torch.cuda.stream(self.alt):
            shared = F.silu(x @ self.w_shared)
            joined.record(self.alt)
        routed = F.silu(x @ self.w_routed)
        main.wait_event(joined)
        return h + routed + shared


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
