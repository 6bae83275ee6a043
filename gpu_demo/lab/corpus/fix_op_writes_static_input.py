"""Fix: the op between the pieces writes into the tensor the next piece was captured with (vLLM #53915).

The twin of ``op_between_pieces_fresh``: the same two pieces and the same
eager op between them, but the op writes its result into the static
activation the second piece was captured reading (``out=``), as vLLM's
piecewise backend keeps static buffers between pieces.

Safe: the second piece reads this step's activation.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN, STEPS = 8, 256, 4


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.gate_up = torch.nn.Linear(HIDDEN, 2 * HIDDEN, bias=False, device=device, dtype=dtype)
        self.down = torch.nn.Linear(HIDDEN, HIDDEN, bias=False, device=device, dtype=dtype)


def silu_and_mul(h: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    gate, up = h.chunk(2, dim=-1)
    return torch.mul(F.silu(gate), up, out=out)


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def piece(fn, *args: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Warm ``fn`` up on a side stream and capture it: one piece."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    return graph, out


@torch.no_grad()
def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture both pieces, then run ``STEPS`` steps (piece, eager op, piece); each step's error against
    the layer run eagerly."""
    layer = Layer(device, dtype)
    x = torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype)
    g_attn, gate_up = piece(layer.gate_up, x)
    act = silu_and_mul(gate_up)
    g_down, out = piece(layer.down, act)
    generator = torch.Generator().manual_seed(1)
    errors = []
    for _ in range(STEPS):
        new = torch.randn(TOKENS, HIDDEN, generator=generator).to(device, dtype)
        x.copy_(new)
        g_attn.replay()
        silu_and_mul(gate_up, out=act)  # eager between the pieces, into the piece's static input
        g_down.replay()
        errors.append(error(out, layer.down(silu_and_mul(layer.gate_up(new)))))
    torch.cuda.synchronize()
    return errors
