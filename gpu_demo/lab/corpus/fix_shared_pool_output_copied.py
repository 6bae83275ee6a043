"""Fix: read each graph's output before the next graph in the pool replays (vLLM #42177).

The twin of ``shared_pool_clobber``: the same graphs in one pool, with weak
references to their outputs, but the script copies the first graph's output
out (``.clone()``) right after its replay, before the second graph replays
over that memory, as the shared pool's contract asks.

Safe: every read matches eager, and no replay overwrites a result still to be read.
"""

import torch

EXPECTED = "safe"
HIDDEN, SIZES, STEPS = 512, (16, 8), 3


def weak_ref(t: torch.Tensor) -> torch.Tensor:
    """A tensor on ``t``'s memory that does not keep it allocated (vLLM's ``weak_ref_tensor``)."""
    storage = torch._C._construct_storage_from_data_pointer(t.untyped_storage().data_ptr(), t.device,
                                                            t.untyped_storage().nbytes())
    return torch.empty(0, device=t.device, dtype=t.dtype).set_(storage, t.storage_offset(), t.shape, t.stride())


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture one graph per batch size into one pool, serve ``STEPS`` steps, and return the
    relative error of the first graph's output, as read, against an eager run on its input."""
    w = torch.randn(HIDDEN, HIDDEN, device=device, dtype=dtype) / HIDDEN**0.5
    statics = {b: torch.randn(b, HIDDEN, device=device, dtype=dtype) for b in SIZES}
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for b in SIZES:
            for _ in range(2):
                statics[b] @ w
    torch.cuda.current_stream().wait_stream(side)
    graphs, outputs, pool = {}, {}, None
    for b in SIZES:
        graphs[b] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[b], pool=pool):
            out = statics[b] @ w
        pool = pool or graphs[b].pool()
        outputs[b] = weak_ref(out)
        del out   # the runner keeps weak references: the pool may reuse the memory
    first = SIZES[0]
    generator = torch.Generator().manual_seed(1)
    errors = []
    for _ in range(STEPS):
        new = {b: torch.randn(b, HIDDEN, generator=generator).to(device, dtype) for b in SIZES}
        for b in SIZES:
            statics[b].copy_(new[b])
        graphs[first].replay()
        read = outputs[first].clone()   # copied out before the next graph replays over it
        for b in SIZES[1:]:
            graphs[b].replay()
        errors.append(error(read, new[first] @ w))
    torch.cuda.synchronize()
    return errors
