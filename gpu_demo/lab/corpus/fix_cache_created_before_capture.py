"""Fix: one cache per batch size, created before any capture (transformers #48199).

The twin of ``lazy_cache_in_capture``: the script creates the layer's caches
eagerly, one per batch size it will capture, before the first capture, so
each graph writes its own cache and no replay writes another graph's output.

Safe: every read matches eager.
"""

import torch

EXPECTED = "safe"
HIDDEN, SIZES, STEPS = 512, (16, 8), 3


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.caches: dict[int, torch.Tensor] = {}

    def create_caches(self, sizes: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> None:
        """Before capturing: one cache per batch size, outside every graph's pool."""
        self.caches = {b: torch.empty(b, HIDDEN, device=device, dtype=dtype) for b in sizes}

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = self.caches[h.shape[0]]
        torch.matmul(h, self.w, out=out)
        return out


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture one graph per batch size into one pool, serve ``STEPS`` steps, and return the
    first graph's output error against eager, read after both replayed."""
    layer = Layer(device, dtype)
    layer.create_caches(SIZES, device, dtype)
    statics = {b: torch.randn(b, HIDDEN, device=device, dtype=dtype) for b in SIZES}
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for b in SIZES:
            layer(statics[b])
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
