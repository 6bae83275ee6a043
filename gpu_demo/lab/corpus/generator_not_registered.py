"""Sampling from a private CUDA generator whose seed and offset the host reads and passes to the kernel
(Megatron-LM #5697, #5791; SGLang-omni #415).

A whole script, run as one (``CAPTURE_ORDER_CHECK=1``). The sampler of a
captured decode step draws from its own ``torch.Generator``, as FlashInfer's
sampling backend did in Megatron-LM's inference engine: the host reads the
generator's seed and offset (``get_seed_and_offset``: ``get_state``, the offset
advanced by hand, ``set_state``) and hands them to the kernel as two integers.
A graph freezes those integers: every replay draws the capture's numbers, and
the generator was never registered with the graph
(``register_generator_state``), which would not help a host read anyway. The
kernel here is a counter-based hash of (seed, offset, element), as philox is,
written with torch ops. The truth reseeds the generator before each replay and
before the eager step it is compared with.

Hazardous: every replay samples with the capture's noise (``silent_wrong``).
Checker rule 8 (``frozen_host_value``) sees the offset change from call to call
while the graph keeps the capture's. (A random op of PyTorch's own on an
unregistered generator is refused at capture instead, since PyTorch 2.4:
"Attempt to increase offset for a CUDA generator not in capture mode".)
"""

import torch

EXPECTED = "hazardous"
TOKENS, HIDDEN, VOCAB, STEPS, SEED = 8, 256, 512, 3, 1234


def get_seed_and_offset(generator: torch.Generator, increment: int) -> tuple[int, int]:
    """FlashInfer's (and aiter's) helper: the generator's state read on the host, its offset advanced by hand."""
    seed, offset = generator.get_state().view(torch.int64).tolist()
    advanced = torch.tensor([seed, offset + (increment + 3) // 4 * 4], dtype=torch.int64)
    generator.set_state(advanced.view(torch.uint8))
    return seed, offset


def uniform(shape: tuple[int, ...], seed: int, offset: int, device: torch.device) -> torch.Tensor:
    """Counter-based uniforms in (0, 1) from (seed, offset, element index): the sampling kernel's draw."""
    x = torch.arange(offset, offset + TOKENS * VOCAB, device=device, dtype=torch.int64).view(shape)
    x = x * 6364136223846793005 + seed
    x = x ^ (x >> 29)
    x = x * 1442695040888963407
    x = x ^ (x >> 31)
    return (((x >> 20) & 0xFFFFFF).float() + 0.5) / 16777216.0


class Sampler(torch.nn.Module):
    """The decode step's head, then Gumbel-max sampling with noise from the sampler's generator."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False, device=device, dtype=dtype)
        self.rng = torch.Generator(device=device)        # the sampling backend's own generator
        self.rng.manual_seed(SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(x).float()
        seed, offset = get_seed_and_offset(self.rng, logits.numel())
        gumbel = -torch.log(-torch.log(uniform(tuple(logits.shape), seed, offset, logits.device)))
        return logits + gumbel   # the sampled token is its argmax


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
