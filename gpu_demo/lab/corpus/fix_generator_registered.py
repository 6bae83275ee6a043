"""Fix: the sampler's generator is drawn from by a kernel that reads its state on the device, and registered
with the graph (Megatron-LM #5697, #5791; SGLang-omni #415).

The twin of ``generator_not_registered``: the same decode step and Gumbel-max
sampling from the sampler's own ``torch.Generator``, but the noise comes from
PyTorch's own draw (``torch.rand(..., generator=...)``), whose kernel reads
the generator's seed and offset through the graph, and
``graph.register_generator_state(sampler.rng)`` before the capture, as
Megatron-LM's fix registers the sampling backend's generators: every replay
reads the generator's current state and advances it.

Safe: each replay samples with the noise the eager step draws from the same seed.
"""

import torch

EXPECTED = "safe"
TOKENS, HIDDEN, VOCAB, STEPS, SEED = 8, 256, 512, 3, 1234


class Sampler(torch.nn.Module):
    """The decode step's head, then Gumbel-max sampling with noise from the sampler's generator."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False, device=device, dtype=dtype)
        self.rng = torch.Generator(device=device)        # the sampling backend's own generator
        self.rng.manual_seed(SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(x).float()
        u = torch.rand(logits.shape, generator=self.rng, device=logits.device).clamp_(1e-7, 1 - 1e-7)
        return logits - torch.log(-torch.log(u))   # the sampled token is its argmax


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


@torch.no_grad()
def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture the step, then replay it ``STEPS`` times, each from a new seed of the generator; each
    replay's error against the step run eagerly from the same seed."""
    sampler = Sampler(device, dtype)
    static = torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            sampler(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(sampler.rng)   # each replay now advances it
    with torch.cuda.graph(graph):
        out = sampler(static)
    errors = []
    for step in range(STEPS):
        sampler.rng.manual_seed(SEED + 1 + step)
        graph.replay()
        got = out.clone()
        sampler.rng.manual_seed(SEED + 1 + step)
        errors.append(error(got, sampler(static)))
    torch.cuda.synchronize()
    return errors
