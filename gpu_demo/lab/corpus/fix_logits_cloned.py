"""Fix: each step's logits are cloned before the loop keeps them (PyTorch #181723, #154306; TransformerEngine #2937).

The twin of ``logits_kept_without_clone``: the same decode graph and loop, but
each step's logits are copied out of the graph's static output
(``static_logits.clone()``) before they are kept, into memory of their own
that no replay writes.

Safe: every kept step holds its own logits.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
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
        scores.append(static_logits.clone())      # this step's values, in memory of their own
    stacked = torch.stack(scores)
    torch.cuda.synchronize()
    return [error(stacked[k], model(h)) for k, h in enumerate(hidden)]
