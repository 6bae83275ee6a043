"""Two batch sizes' graphs in one pool; the first graph's output read after the second replayed (vLLM #42177).

A whole serving script, run as one (``CAPTURE_ORDER_CHECK=1``): one graph per
batch size, the largest first, all captured into the first graph's pool
(``torch.cuda.graph(g, pool=pool)``), as serving engines do. Like vLLM's
runner (#9724), it keeps only a weak reference to each graph's output, so
the pool may give that memory to the next graph's capture: the graphs are
meant to be replayed one at a time, each output read before the next replay.
This script reads the first graph's output after replaying the second, whose
output now lives in the same memory.

Hazardous: the first graph's output holds the second graph's rows
(``silent_wrong``); checker rule 11 (``graphs_clobber``) names both graphs
at the replay that overwrote it.
"""

import torch

EXPECTED = "hazardous"
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
        for b in SIZES[1:]:
            graphs[b].replay()
        read = outputs[first].clone()   # read after the second graph replayed
        errors.append(error(read, new[first] @ w))
    torch.cuda.synchronize()
    return errors
