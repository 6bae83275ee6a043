"""Fix: the workspace sized once, for the largest batch, before any capture (FlashInfer #4398).

The twin of ``workspace_resized_under_graph``: the same layer and script, but
the workspace is made for the largest batch up front, so no warm-up grows it,
no storage moves, and every graph keeps writing memory the layer owns.

Safe: every replay matches eager, and the request's tensor is left alone.
"""

import torch

EXPECTED = "safe"
HIDDEN, SIZES, STEPS = 512, (8, 16), 3
WORKSPACE_ROWS = max(SIZES)   # sized once, for the largest batch


class Layer(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype, rows: int) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5)
        self.workspace = torch.empty(rows * HIDDEN, device=device, dtype=dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        need = h.shape[0] * HIDDEN
        if self.workspace.numel() < need:
            self.workspace.resize_(need)   # grown in place: the storage moves, the old block is freed
        ws = self.workspace[:need].view(h.shape[0], HIDDEN)
        torch.matmul(h, self.w, out=ws)
        return h + torch.relu(ws)


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Warm up and capture each batch size in turn on a workspace of ``WORKSPACE_ROWS`` rows, then serve
    ``STEPS`` steps: the relative change of a request's tensor made after the captures, and
    each graph's output error against eager."""
    layer = Layer(device, dtype, WORKSPACE_ROWS)
    statics = {b: torch.randn(b, HIDDEN, device=device, dtype=dtype) for b in SIZES}
    graphs, outputs = {}, {}
    for b in SIZES:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                layer(statics[b])
        torch.cuda.current_stream().wait_stream(side)
        graphs[b] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[b]):
            outputs[b] = layer(statics[b])
    request = torch.randn(SIZES[0], HIDDEN, device=device, dtype=dtype)   # the next request's hidden states
    kept = request.clone()
    generator = torch.Generator().manual_seed(1)
    errors = []
    for _ in range(STEPS):
        for b in SIZES:
            new = torch.randn(b, HIDDEN, generator=generator).to(device, dtype)
            statics[b].copy_(new)
            graphs[b].replay()
            errors.append(error(outputs[b], new + torch.relu(new @ layer.w)))
        errors.append(error(request, kept))
    torch.cuda.synchronize()
    return errors
