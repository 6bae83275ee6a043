"""A host float the layer changes every call, frozen into the graph (vLLM #46913, SGLang #29508).

A decode layer keeps its position as a Python int (``self.step``) and scales
its input by a host float derived from it, ``1 / (1 + 0.1 * self.step)``, as
the threads' captured kernels took a host scalar. A kernel launch passes a
Python float by value: the capture freezes the value of the capture's call,
and every replay multiplies by it, while eager calls move on.

Hazardous: each replay computes with the capture's scale (``silent_wrong``);
checker rule 8 (``frozen_host_value``) sees the scale take a new value in each
warm-up call.
"""

import torch
import torch.nn.functional as F

EXPECTED = "hazardous"
TOKENS, HIDDEN = 16, 512


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.step = 0

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        self.step += 1
        scale = 1.0 / (1.0 + 0.1 * self.step)   # a host value that changes every call
        return h + F.silu(h @ self.w) * scale


def make(device: torch.device, dtype: torch.dtype) -> tuple[Layer, tuple[torch.Tensor]]:
    return Layer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
