"""Fix: the private generator is registered with the graph before the capture (Megatron-LM #5697, #5791;
SGLang-omni #415).

The twin of ``generator_not_registered``: the same dropout on the tracker's
generator, but ``graph.register_generator_state(layer.rng)`` before the
capture, as Megatron-LM's CUDA-graphable RNG tracker does. Every replay then
reads the generator's current seed and offset and advances it, as the
default generator is.

Safe: each replay draws the mask the eager step draws from the same seed.
"""

import torch

EXPECTED = "safe"
TOKENS, HIDDEN, P, STEPS, SEED = 8, 256, 0.5, 3, 1234


class ParallelDropout(torch.nn.Module):
    """A row-parallel projection, then dropout with the tracker's generator."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False, device=device, dtype=dtype)
        self.rng = torch.Generator(device=device)        # the model-parallel RNG tracker's generator
        self.rng.manual_seed(SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        keep = torch.empty_like(h).bernoulli_(1 - P, generator=self.rng)
        return h * keep / (1 - P)


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


@torch.no_grad()
def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture the step, then replay it ``STEPS`` times, each from a new seed of the generator; each
    replay's error against the step run eagerly from the same seed."""
    layer = ParallelDropout(device, dtype)
    static = torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            layer(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(layer.rng)   # each replay now advances it
    with torch.cuda.graph(graph):
        out = layer(static)
    errors = []
    for step in range(STEPS):
        layer.rng.manual_seed(SEED + 1 + step)
        graph.replay()
        got = out.clone()
        layer.rng.manual_seed(SEED + 1 + step)
        errors.append(error(got, layer(static)))
    torch.cuda.synchronize()
    return errors
