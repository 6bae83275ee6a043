"""Piecewise graphs: the eager op between two pieces returns a fresh tensor every step (vLLM #53915).

A whole script, run as one (``CAPTURE_ORDER_CHECK=1``). As with vLLM's
piecewise CUDA graphs, the layer is captured in pieces and an op runs eagerly
between them: attention's projection is one piece, the MLP's down projection
another, and ``silu_and_mul`` between them returns a new tensor every step.
The second piece was captured reading the tensor of the capture's step and
keeps reading that address; the runner drops the old activation when it
binds the new one, and the allocator may hand the block back, so the piece
reads a stale activation, or the right one by luck.

Hazardous: the second piece reads the activation of another step
(``silent_wrong``); checker rule 18 (``input_fresh_between_graphs``) names the
fresh tensor the piece never reads, and rule 10 (``freed_under_graph``) the
block the piece reads after it was freed.
"""

import torch
import torch.nn.functional as F

EXPECTED = "hazardous"
TOKENS, HIDDEN, STEPS = 8, 256, 4


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.gate_up = torch.nn.Linear(HIDDEN, 2 * HIDDEN, bias=False, device=device, dtype=dtype)
        self.down = torch.nn.Linear(HIDDEN, HIDDEN, bias=False, device=device, dtype=dtype)


def silu_and_mul(h: torch.Tensor) -> torch.Tensor:
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


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
        act = silu_and_mul(gate_up)     # eager between the pieces: a fresh tensor, the old one let go
        g_down.replay()
        errors.append(error(out, layer.down(silu_and_mul(layer.gate_up(new)))))
    torch.cuda.synchronize()
    return errors
