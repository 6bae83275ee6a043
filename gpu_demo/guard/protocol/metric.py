"""The one error metric every comparison of a replay with its reference uses.

``relative_error`` is ``||got - want|| / ||want||`` in float32. Where the
reference is all zeros the ratio is undefined (0/0 would be NaN, and NaN fails):
there the metric is the absolute error ``||got - want||``, so an all-zero output
that matches an all-zero reference is correct (0.0) and any nonzero output is
as wrong as its size. The conformance matrix's references are never all zeros,
so its committed errors are the same under either rule. NaN in the output stays
NaN, and fails.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._pytree import tree_flatten


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Relative L2 error of ``got`` against ``want`` (absolute where ``want`` is all zeros)."""
    got, want = got.detach().float(), want.detach().float()
    scale = float(torch.linalg.vector_norm(want))
    diff = float(torch.linalg.vector_norm(got - want))
    return diff / scale if scale else diff


def output_tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors of a (nested) output, in ``torch.utils._pytree`` order."""
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def output_error(got: Any, want: Any) -> float:
    """Largest ``relative_error`` over the output tensors (``inf`` if their structure or shapes differ)."""
    got_leaves, want_leaves = output_tensors(got), output_tensors(want)
    if len(got_leaves) != len(want_leaves):
        return math.inf
    worst = 0.0
    for g, w in zip(got_leaves, want_leaves):
        if g.shape != w.shape:
            return math.inf
        error = relative_error(g, w)
        if math.isnan(error):
            return error
        worst = max(worst, error)
    return worst
