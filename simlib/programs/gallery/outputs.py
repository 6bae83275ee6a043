"""Programs that keep a graph's output across its own replays: each step's logits, never copied."""

from __future__ import annotations

from ...engine.runtime import Runtime
from ...engine.tensor import TensorHandle
from ..harness import Build, Program
from .case import refreshed
from .frozen import H

FIRST_STEP = 4     # the single-graph runner warms up twice and captures call 3: generation starts at call 4


def logits_kept(fixed: bool) -> Build:
    """A generate loop that keeps each step's logits in a list and stacks them at the end, as
    ``output_scores`` does; the logits are the graph's static output.

    Fixed: each step's logits are cloned before they are kept.
    """
    def build(rt: Runtime) -> Program:
        x = rt.empty((1, H), "hidden")
        scores: list[TensorHandle] = []

        def keep(k: int, logits: TensorHandle) -> TensorHandle | None:
            if k < FIRST_STEP:
                return None
            scores.append(rt.clone(logits, label=f"scores{k}") if fixed else logits)
            return rt.stack(scores, label="torch.stack(scores)")
        return Program(lambda: rt.op("lm_head", x, out_shape=(1, H), label="logits"),
                       lambda k: refreshed(rt, x, "hidden", k), [x], after=keep)
    return build
