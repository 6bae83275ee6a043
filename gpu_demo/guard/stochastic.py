"""Random ops in a recording, and why the guard can still compare their replays exactly.

A captured random op (dropout in train mode, ``randn``, ``bernoulli``, ...) does
not freeze its numbers. PyTorch's graph-safe RNG (Note [CUDA Graph-safe RNG
states] in ``ATen/cuda/CUDAGeneratorImpl.h``; ``torch/cuda/graphs.py``) captures
each philox kernel with a pointer to the generator's seed and offset plus its
offset inside the graph; every ``graph.replay()`` first writes the generator's
*current* seed and offset there and then advances the offset by the graph's
total. So a replay draws exactly the numbers an eager run draws from the same
generator state, and the guard reseeds (``torch.manual_seed``) before each
eager reference run and before each replay: a correct program compares equal.

Numbers the guard cannot reseed (a private ``torch.Generator`` registered with
the graph, host-side ``random``) make the two differ although the graph is
right. That is why a mismatch with no checker finding is ``graph_eager_differ``
and not ``silent_wrong`` (``gpu_demo.guard.check``); the report names the random
ops it saw so the reader knows which comparison was made.
"""

from __future__ import annotations

import torch

from simlib.trace import Launch, Trace

RANDOM_OPS = frozenset({
    "bernoulli", "bernoulli_", "binomial", "cauchy_", "dropout", "exponential_", "geometric_", "log_normal_",
    "multinomial", "native_dropout", "normal", "normal_", "poisson", "rand", "rand_like", "randint",
    "randint_like", "randn", "randn_like", "random_", "randperm", "rrelu_with_noise", "uniform_",
    "_fused_dropout", "_standard_gamma", "_sample_dirichlet", "feature_dropout", "alpha_dropout",
})


def is_random(kernel: str) -> bool:
    """True for an aten op that draws random numbers (``aten.bernoulli_.float``, ``aten.randn.default``)."""
    parts = kernel.split(".")
    name = parts[1] if len(parts) > 1 and parts[0] == "aten" else parts[0]
    return name in RANDOM_OPS


def random_ops(trace: Trace) -> list[str]:
    """The random ops launched inside a capture of ``trace``, once each, sorted."""
    return sorted({r.kernel for r in trace.records if isinstance(r, Launch) and r.graph is not None
                   and is_random(r.kernel)})


def reseed(seed: int) -> None:
    """Put every generator torch owns (CPU and each CUDA device) at ``seed``, offset 0."""
    torch.manual_seed(seed)
