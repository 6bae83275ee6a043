"""A cache created lazily inside the first capture, then shared by the next graph (transformers #48199).

A whole serving script, run as one (``CAPTURE_ORDER_CHECK=1``). The layer
creates its output cache on first use, sized for the largest batch, and
returns a view of it, as the thread's lazily initialised cache did. The
capture is that first use, so the cache is made inside the first graph's
capture and lives in its pool. The second batch size's graph, captured into
the same pool, finds the cache made and writes its rows there too. Reading
the first graph's output after replaying the second reads the second's rows.

Hazardous: the first graph's output holds the second graph's rows
(``silent_wrong``); checker rule 11 (``graphs_clobber``) names both graphs.
"""

import torch

EXPECTED = "hazardous"
HIDDEN, SIZES, STEPS = 512, (16, 8), 3


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.cache: torch.Tensor | None = None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.cache is None:   # made on first use: here, inside the first capture
            self.cache = torch.empty(max(SIZES), HIDDEN, device=h.device, dtype=h.dtype)
        out = self.cache[:h.shape[0]]
        torch.matmul(h, self.w, out=out)
        return out


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture one graph per batch size into one pool (the cache made inside the first), serve
    ``STEPS`` steps, and return the first graph's output error against eager, read after both replayed."""
    layer = Layer(device, dtype)
    statics = {b: torch.randn(b, HIDDEN, device=device, dtype=dtype) for b in SIZES}
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for b in SIZES:
            statics[b] @ layer.w   # cuBLAS initialised; the layer itself first runs in the capture
    torch.cuda.current_stream().wait_stream(side)
    graphs, outputs, pool = {}, {}, None
    for b in SIZES:
        graphs[b] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[b], pool=pool):
            outputs[b] = layer(statics[b])
        pool = pool or graphs[b].pool()
    generator = torch.Generator().manual_seed(1)
    errors = []
    for _ in range(STEPS):
        new = {b: torch.randn(b, HIDDEN, generator=generator).to(device, dtype) for b in SIZES}
        for b in SIZES:
            statics[b].copy_(new[b])
            graphs[b].replay()
        errors.append(error(outputs[SIZES[0]], new[SIZES[0]] @ layer.w))
    torch.cuda.synchronize()
    return errors
