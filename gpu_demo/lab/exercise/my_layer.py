"""GPU lab: make a dual-stream layer safe to capture into a CUDA graph.

``MyLayer`` is a small MoE-style layer: ``h + routed(x) + shared(x)`` with
``x = rms_norm(h)``. Eagerly it runs both branches on one stream. Under CUDA
graph capture it should overlap them on two streams, as SGLang's DeepSeek-V3
layer does: the shared branch on the side stream ``self.alt``, the routed
branch on the current stream. That path is yours to write:
``MyLayer.forward_dual_stream`` (the TODO below).

One catch, from a real incident: ``routed(x)`` frees ``x`` early to save
memory (``dispose=True`` empties it on the host with ``x.set_(...)``, as
SGLang's ``dispose_tensor`` does). Under capture, what each launch freezes is
decided by the order of your Python statements, not by the streams.

Check your layer on a GPU seat (exit 0: it passed; 1: the report says why not):

    python -m gpu_demo check gpu_demo.lab.exercise.my_layer:make --strict
    pytest gpu_demo/lab/exercise/test_my_layer.py

The check captures your layer in a child process, replays it with fresh inputs
against an eager run, and checks what the capture froze. On a CPU seat the same
commands can only do the static dry run: the dual-stream path runs only under a
real CUDA capture, so there it sees the eager path, and the report says so.
"""

import torch
import torch.nn.functional as F

TOKENS, HIDDEN = 16, 512


class MyLayer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w_routed", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.register_buffer("w_shared", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.alt = torch.cuda.Stream(device) if device.type == "cuda" else None

    def shared(self, x: torch.Tensor) -> torch.Tensor:
        """The shared expert: every token goes through it."""
        return F.silu(x @ self.w_shared)

    def routed(self, x: torch.Tensor, dispose: bool = True) -> torch.Tensor:
        """The routed experts: a permuted copy of ``x``, then (``dispose=True``) ``x`` is freed
        early on the host, then the experts run on the copy."""
        permuted = x.flip(0)
        if dispose:
            x.set_(torch.empty((0,), device=x.device, dtype=x.dtype))
        return F.silu(permuted @ self.w_routed).flip(0)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = F.rms_norm(h, (HIDDEN,))
        if self.alt is not None and torch.cuda.is_current_stream_capturing():
            routed, shared = self.forward_dual_stream(x)
        else:
            shared = self.shared(x)
            routed = self.routed(x)
        return h + routed + shared

    def forward_dual_stream(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """TODO: return ``(routed, shared)`` computed on two streams, safe to capture.

        1. Fork: the side stream must wait for the work already issued on the
           current stream (``self.alt.wait_stream(torch.cuda.current_stream())``).
        2. Issue the two branches: ``self.shared(x)`` inside
           ``with torch.cuda.stream(self.alt):``, and ``self.routed(x, dispose=...)``
           on the current stream. Decide the order, and whether to dispose.
        3. Join: the current stream must wait for the side stream before the
           merge reads ``shared`` (``torch.cuda.current_stream().wait_stream(self.alt)``).

        Before you run the check, predict: what does each replay compute if the
        routed branch, with ``dispose=True``, is issued first? And if it is issued
        second?
        """
        raise NotImplementedError("TODO: write MyLayer.forward_dual_stream in gpu_demo/lab/exercise/my_layer.py (its "
                                  "docstring says how), then run: python -m gpu_demo check "
                                  "gpu_demo.lab.exercise.my_layer:make --strict")


def make(device: torch.device, dtype: torch.dtype) -> tuple[MyLayer, tuple[torch.Tensor]]:
    return MyLayer(device, dtype), (torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype),)
