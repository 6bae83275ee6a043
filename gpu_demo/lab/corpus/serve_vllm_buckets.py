"""A vLLM-style runner: one graph per batch-size bucket in one pool, outputs kept as weak references (vLLM #9724).

A whole serving script, run as one (``CAPTURE_ORDER_CHECK=1``), shaped like
vLLM's ``CUDAGraphRunner`` and ``capture_model``: a 4-layer decoder stack; one
static input buffer per bucket (1, 2, 4, 8, 16); each bucket warmed up
eagerly on a side stream and captured, the largest first, into the first
graph's pool; of each graph's output only a weak reference kept (#9724), so
the next bucket's capture may lay its tensors over it. Then a decode loop of
changing batch sizes: each step copies its batch into the first rows of its
bucket's static input, replays that bucket's graph, and copies the output's
first rows out before any other replay. Each step is compared with an eager
run of the stack on the same padded input.

Safe: once the host has copied a bucket's output out, that graph's output and
intermediates are dead, so the next bucket reusing their pool memory clobbers
nothing anyone reads; every step matches eager, and the whole-process check
must find nothing (no rule 11, ``graphs_clobber``). Its hazardous twins:
``serve_output_read_after_other_bucket`` reads an output after the next
replay (rule 11), ``serve_static_input_rebuilt`` rebinds a static input
(rule 10, ``freed_under_graph``).
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
HIDDEN, FFN, LAYERS = 256, 512, 4
BUCKETS = (16, 8, 4, 2, 1)   # captured largest first, as vLLM does
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


def weak_ref(t: torch.Tensor) -> torch.Tensor:
    """A tensor on ``t``'s memory that does not keep it allocated (vLLM's ``weak_ref_tensor``)."""
    storage = torch._C._construct_storage_from_data_pointer(t.untyped_storage().data_ptr(), t.device,
                                                            t.untyped_storage().nbytes())
    return torch.empty(0, device=t.device, dtype=t.dtype).set_(storage, t.storage_offset(), t.shape, t.stride())


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def eager(x: torch.Tensor, weights: Weights) -> torch.Tensor:
    """The stack run eagerly on ``x`` padded with zero rows to its bucket, its first rows."""
    padded = torch.zeros(bucket_for(x.shape[0]), HIDDEN, device=x.device, dtype=x.dtype)
    padded[:x.shape[0]] = x
    return decoder(padded, weights)[:x.shape[0]]


def capture_buckets(weights: Weights, statics: dict[int, torch.Tensor]) -> tuple[dict, dict]:
    """Warm each bucket up on a side stream, then capture it, the largest first, into one pool."""
    graphs, outputs, pool = {}, {}, None
    side = torch.cuda.Stream()
    for b in BUCKETS:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                decoder(statics[b], weights)
        torch.cuda.current_stream().wait_stream(side)
        graphs[b] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[b], pool=pool):
            out = decoder(statics[b], weights)
        pool = pool or graphs[b].pool()
        outputs[b] = weak_ref(out)
        del out   # the runner keeps weak references: the pool may reuse the memory
    return graphs, outputs


def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture the buckets, serve ``BATCHES``, and return each step's relative error against eager."""
    weights = decoder_weights(device, dtype)
    statics = {b: torch.zeros(b, HIDDEN, device=device, dtype=dtype) for b in BUCKETS}
    graphs, outputs = capture_buckets(weights, statics)
    generator = torch.Generator().manual_seed(1)
    errors = []
    for n in BATCHES:
        b = bucket_for(n)
        x = torch.randn(n, HIDDEN, generator=generator).to(device, dtype)   # this step's hidden states
        statics[b][:n].copy_(x)
        graphs[b].replay()
        got = outputs[b][:n].clone()   # copied out before any other replay
        errors.append(error(got, eager(x, weights)))
    torch.cuda.synchronize()
    return errors
