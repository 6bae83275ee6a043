"""Routed branch first, ``x`` emptied by ``set_``, shared branch behind a shape guard.

The dual-stream layer of the SGLang incident. Under capture the routed branch
(current stream) is issued first and frees ``x`` with
``x.set_(torch.empty((0,)))``; the shared branch (side stream) then asks
``if x.shape[0] == 0`` and, finding no rows, skips its matmul. It writes into a
static output buffer that was zeroed once, so the merge reads whatever that
buffer held when the graph was captured.

Hazardous: the graph holds no node for the shared branch, and every replay is
silently wrong (``silent_wrong``: the incident's accuracy collapse).
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
        x.set_(torch.empty((0,), device=x.device, dtype=x.dtype))  # dispose_tensor(x): free it early
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
