"""A generate loop keeps each step's static logits without a clone (PyTorch #181723, #154306; TransformerEngine #2937).

A whole script, run as one (``CAPTURE_ORDER_CHECK=1``). A decode step is
captured once and replayed per token; like ``generate(output_scores=True)``,
the loop keeps each step's logits in a list and stacks them at the end. The
logits are the graph's static output, so the list holds the same memory once
per step and every replay writes it again (as ``make_graphed_callables``'
static outputs and gradient buffers are rewritten by the next call, #181723
with TransformerEngine #2937; an output dead at capture and live at replay,
#154306). The token sampled right after each replay is right, so the text
looks fine; the stacked scores are the last step's, repeated.

Hazardous: every kept step but the last holds the last step's logits
(``silent_wrong``); checker rule 13 (``output_overwritten``) names the reads of
the kept logits after the replays that rewrote them.
"""

import torch
import torch.nn.functional as F

EXPECTED = "hazardous"
TOKENS, HIDDEN, VOCAB, STEPS = 4, 256, 1024, 4


class Decoder(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.mlp = torch.nn.Linear(HIDDEN, HIDDEN, bias=False, device=device, dtype=dtype)
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False, device=device, dtype=dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(h + F.silu(self.mlp(h)))


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


@torch.no_grad()
def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture the decode step, replay it ``STEPS`` times keeping each step's logits, stack them, and
    return each kept step's error against the step run eagerly."""
    model = Decoder(device, dtype)
    static_hidden = torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            model(static_hidden)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_logits = model(static_hidden)
    generator = torch.Generator().manual_seed(1)
    hidden, scores, tokens = [], [], []
    for _ in range(STEPS):
        hidden.append(torch.randn(TOKENS, HIDDEN, generator=generator).to(device, dtype))
        static_hidden.copy_(hidden[-1])
        graph.replay()
        tokens.append(static_logits.argmax(-1))   # sampled at once: right
        scores.append(static_logits)              # kept: the graph's output, rewritten by the next replay
    stacked = torch.stack(scores)
    torch.cuda.synchronize()
    return [error(stacked[k], model(h)) for k, h in enumerate(hidden)]
