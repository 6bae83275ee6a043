"""Dropout drawing from a private CUDA generator the graph was not told about (Megatron-LM #5697, #5791;
SGLang-omni #415).

A whole script, run as one (``CAPTURE_ORDER_CHECK=1``). Dropout in a
tensor-parallel region draws from the model-parallel RNG tracker's own
``torch.Generator``, not the default one, and the step is captured without
``graph.register_generator_state`` for it. A graph advances the default
generator and the registered ones on every replay; the threads report the
other kind frozen into the capture, every replay drawing the capture's mask.
PyTorch 2.4 and later refuse instead: a draw from a CUDA generator not
registered with the capturing graph raises ("Attempt to increase offset for
a CUDA generator not in capture mode", ``CUDAGeneratorState::increase``). The
truth reseeds the generator before each replay and before the eager step it
is compared with, so a graph that advances it draws the eager step's mask.

Hazardous: on PyTorch 2.4 and later the capture fails, and checker rule 0
(``capture_failed``) reports torch's error; where a capture goes through,
every replay draws the capture's mask (``silent_wrong``), and rule 17
(``unregistered_generator``) names the generator the dropout node draws from.
"""

import torch

EXPECTED = "hazardous"
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
