"""Fix: the target's logits are copied out before the draft replays into the shared pool (vLLM #53488, #53520).

The twin of ``drafter_shared_pool``: the same two graphs in one pool, but
the runner clones the target's logits right after the target's replay and
verifies against the copy, so the draft's replay may reuse the pool's
memory without changing what is verified.

Safe: the verification reads the target's logits of this step.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN, VOCAB, STEPS = 4, 256, 1024, 3


class LM(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.mlp = torch.nn.Linear(HIDDEN, HIDDEN, bias=False, device=device, dtype=dtype)
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False, device=device, dtype=dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(h + F.silu(self.mlp(h)))


def weak_ref(t: torch.Tensor) -> torch.Tensor:
    """A tensor on ``t``'s memory that does not keep it allocated (vLLM's ``weak_ref_tensor``)."""
    storage = torch._C._construct_storage_from_data_pointer(t.untyped_storage().data_ptr(), t.device,
                                                            t.untyped_storage().nbytes())
    return torch.empty(0, device=t.device, dtype=t.dtype).set_(storage, t.storage_offset(), t.shape, t.stride())


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def captured(model: LM, static: torch.Tensor, pool: object) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Warm ``model`` up on a side stream, capture it into ``pool`` and keep its logits as a weak reference."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            model(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        logits = model(static)
    return graph, weak_ref(logits)


@torch.no_grad()
def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture the target, then the draft into its pool; each step replays both and returns the error of
    the target's logits, as the verification reads them, against the target run eagerly."""
    target, draft = LM(device, dtype), LM(device, dtype)
    tokens = torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype)
    draft_hidden = torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype)
    g_target, target_logits = captured(target, tokens, None)
    g_draft, draft_logits = captured(draft, draft_hidden, g_target.pool())
    generator = torch.Generator().manual_seed(1)
    errors = []
    for _ in range(STEPS):
        x = torch.randn(TOKENS, HIDDEN, generator=generator).to(device, dtype)
        tokens.copy_(x)
        g_target.replay()
        verified = target_logits.clone()                # copied out before the draft replays
        draft_hidden.copy_(verified[:, :HIDDEN])   # the draft proposes from the target's state
        g_draft.replay()
        errors.append(error(verified, target(x)))
    torch.cuda.synchronize()
    return errors
