"""An SGLang-style runner: max-size buffers shared by every bucket's graph, each output copied out inside its graph.

A whole serving script, run as one, shaped like SGLang's
``cuda_graph_runner.py``: ONE set of static buffers sized for the largest
batch (SGLang's ``input_ids``, ``out_cache_loc``, ...), allocated before any
capture; each bucket's graph reads the slice ``[:b]`` of them. The graphs,
one per bucket (1, 2, 4, 8, 16), are warmed up eagerly on a side stream and
captured, the largest first, into the first graph's pool, and each copies
its result, inside the graph, into a persistent output buffer allocated
before any capture. The decode loop of changing batch sizes copies each
batch into the shared input, replays its bucket's graph and copies
``out_buf[:n]`` out before the next replay. Each step is compared with an
eager run of the stack on the same padded input.

Safe: the pool holds only intermediates, dead once their graph's replay
ends, and the buffers every graph shares live outside the pool, written by
each replay before the host reads them; every step matches eager, and the
whole-process check must find nothing.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
HIDDEN, FFN, LAYERS = 256, 512, 4
BUCKETS = (16, 8, 4, 2, 1)   # captured largest first, as SGLang does
# each step's batch size, a fixed pseudo-random sequence: 30 decode steps
BATCHES = (3, 16, 16, 1, 7, 2, 12, 4, 16, 9, 1, 5, 8, 8, 2, 11, 3, 4, 14, 6, 1, 8, 10, 2, 15, 4, 7, 1, 13, 16)
Weights = list[tuple[torch.Tensor, ...]]


def decoder_weights(device: torch.device, dtype: torch.dtype) -> Weights:
    """Per layer: the norm's scale, the up and the down projection."""
    return [(torch.rand(HIDDEN, device=device, dtype=dtype) + 0.5,
             torch.randn(HIDDEN, FFN, device=device, dtype=dtype) / HIDDEN**0.5,
             torch.randn(FFN, HIDDEN, device=device, dtype=dtype) / FFN**0.5) for _ in range(LAYERS)]


def decoder(h: torch.Tensor, weights: Weights) -> torch.Tensor:
    """RMS norm, up projection, SiLU, down projection, residual add, per layer: row by row."""
    for scale, up, down in weights:
        x = (h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype) * scale
        h = h + F.silu(x @ up) @ down
    return h


def bucket_for(n: int) -> int:
    return min(b for b in BUCKETS if b >= n)


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def eager(x: torch.Tensor, weights: Weights) -> torch.Tensor:
    """The stack run eagerly on ``x`` padded with zero rows to its bucket, its first rows."""
    padded = torch.zeros(bucket_for(x.shape[0]), HIDDEN, device=x.device, dtype=x.dtype)
    padded[:x.shape[0]] = x
    return decoder(padded, weights)[:x.shape[0]]


def forward(b: int, in_buf: torch.Tensor, out_buf: torch.Tensor, weights: Weights) -> None:
    """Bucket ``b``'s step: the stack on the first ``b`` rows, its result copied into ``out_buf``."""
    out_buf[:b].copy_(decoder(in_buf[:b], weights))


def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture the buckets over the shared buffers, serve ``BATCHES``, and return each step's
    relative error against eager."""
    weights = decoder_weights(device, dtype)
    in_buf = torch.zeros(max(BUCKETS), HIDDEN, device=device, dtype=dtype)    # before any capture
    out_buf = torch.zeros(max(BUCKETS), HIDDEN, device=device, dtype=dtype)
    graphs, pool = {}, None
    side = torch.cuda.Stream()
    for b in BUCKETS:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                forward(b, in_buf, out_buf, weights)
        torch.cuda.current_stream().wait_stream(side)
        graphs[b] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[b], pool=pool):
            forward(b, in_buf, out_buf, weights)
        pool = pool or graphs[b].pool()
    generator = torch.Generator().manual_seed(1)
    errors = []
    for n in BATCHES:
        b = bucket_for(n)
        x = torch.randn(n, HIDDEN, generator=generator).to(device, dtype)   # this step's hidden states
        in_buf[:n].copy_(x)
        graphs[b].replay()
        got = out_buf[:n].clone()   # read before the next replay writes out_buf again
        errors.append(error(got, eager(x, weights)))
    torch.cuda.synchronize()
    return errors
