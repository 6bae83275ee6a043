"""Routed branch first, ``x`` emptied by ``set_``, shared branch in plain torch ops.

A dual-stream MoE-style layer written like SGLang's DeepSeek-V3 layer: under
capture, the routed branch runs on the current stream and the shared branch on
a side stream (``alt.wait_stream(main)`` ... ``main.wait_stream(alt)``). The
routed branch is issued first, and its pre-permute step frees ``x`` early with
``x.set_(torch.empty((0,)))``, before the shared branch's launches are issued.

Hazardous: ``x @ w_shared`` checks shapes on the host while capturing (0 rows
against 512), so the capture fails: ``capture_error:shape_mismatch``.
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

    def routed(self, x: torch.Tensor) -> torch.Tensor:
        permuted = x.flip(0)  # the pre-permute copy
        x.set_(torch.empty((0,), device=x.device, dtype=x.dtype))  # dispose_tensor(x): free it early
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
