"""Routed branch first, ``x``'s storage freed by ``untyped_storage().resize_(0)``, shape guard.

The dual-stream layer of the SGLang incident, but the routed branch frees
``x`` the way FSDP-style code frees parameters: ``x.untyped_storage().resize_(0)``.
The tensor keeps its shape ``[16, 512]``; its pointer becomes 0 and its storage
holds no bytes. The shared branch's guard ``if x.shape[0] == 0`` therefore
passes, and its matmul is captured reading ``TOKENS * HIDDEN`` elements at
address 0.

Hazardous: the graph holds a node whose frozen pointer is 0; a replay faults
(``illegal_address``), unless the library refuses the null pointer at capture.
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
        x.untyped_storage().resize_(0)  # free x's memory early; x keeps its shape
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
