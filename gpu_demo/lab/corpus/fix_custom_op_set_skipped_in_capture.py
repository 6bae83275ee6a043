"""Fix: skip the custom op's ``set_`` free while capturing.

The twin of ``custom_op_set_empty``: the routed branch is still issued first,
but the call of the disposing custom op is skipped when
``torch.cuda.is_current_stream_capturing()`` is true, so during capture ``x``
keeps its storage and the shared branch's matmul is captured with it.

Safe: replays match eager.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN = 16, 512


@torch.library.custom_op("capture_order_corpus::dispose_unless_capturing", mutates_args=("x",))
def dispose(x: torch.Tensor) -> None:
    x.set_(torch.empty((0,), device=x.device, dtype=x.dtype))


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w_routed", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("w_shared", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("out", torch.zeros(TOKENS, HIDDEN, device=device, dtype=dtype))
        self.alt = torch.cuda.Stream(device) if device.type == "cuda" else None

    def routed(self, x: torch.Tensor) -> torch.Tensor:
        permuted = x.flip(0)  # the pre-permute copy
        if not (x.is_cuda and torch.cuda.is_current_stream_capturing()):  # never while capturing
            dispose(x)  # a custom op that frees x early
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
