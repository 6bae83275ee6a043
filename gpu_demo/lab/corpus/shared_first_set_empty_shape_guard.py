"""Shared branch first (the #29463 reland), ``x`` emptied by ``set_``, shape guard.

The fix SGLang shipped: the shared branch (side stream) is issued first, so its
launches freeze the real ``x``; then the routed branch (current stream) frees
``x`` with ``x.set_(torch.empty((0,)))``. During capture that free hands ``x``'s
block back to the graph's pool, and the routed branch's next allocation of the
same size, on the current stream, gets it.

Hazardous, though every replay we ran may be correct: nothing orders the
shared branch's read of ``x`` on the side stream before the routed branch's
write into the reused block (``unordered``: checker rule 4, reuse_after_free).
A slower shared branch would read the routed result instead of ``x``.
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
            with torch.cuda.stream(self.alt):
                shared = self.shared(x)
            routed = self.routed(x)
            main.wait_stream(self.alt)
        else:
            shared = self.shared(x)
            routed = self.routed(x)
        return h + routed + shared


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
