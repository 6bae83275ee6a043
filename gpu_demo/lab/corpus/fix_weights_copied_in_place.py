"""Fix: the weight sync copies into the captured parameters in place (vLLM #48251, SGLang #4961).

The twin of ``weights_rebound_after_sync``: the same engine and trainer, but
the sync writes each new weight into the parameter the graph was captured
with (``policy.get_parameter(name).copy_(new)``, as vLLM's in-place weight
update and SGLang's ``update_weights_from_tensor`` do), and the trainer keeps
its reference policy as a copy. The addresses the graph holds now hold the
new policy.

Safe: every replay after a sync matches the policy run eagerly, and no
parameter is rebound.
"""

import torch
import torch.nn.functional as F

EXPECTED = "safe"
TOKENS, HIDDEN, LAYERS, STEPS = 8, 256, 3, 4


class Policy(torch.nn.Module):
    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, HIDDEN, bias=False, device=device, dtype=dtype)
                                          for _ in range(LAYERS))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = h + F.silu(layer(h))
        return h


def trained(reference: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The trainer's next weights: the reference policy's, moved by a step of noise."""
    return {name: p + 0.05 * torch.randn(p.shape, generator=generator).to(p.device, p.dtype)
            for name, p in reference.items()}


def sync_weights(policy: Policy, new_state: dict[str, torch.Tensor]) -> None:
    """The engine's weight sync: each new weight copied into the parameter the graph reads."""
    for name, new in new_state.items():
        policy.get_parameter(name).copy_(new)


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


@torch.no_grad()
def run(device: torch.device, dtype: torch.dtype) -> list[float]:
    """Capture the decode step, then ``STEPS`` times sync new weights and replay; each replay's
    error against the policy run eagerly with the weights it now holds."""
    policy = Policy(device, dtype).requires_grad_(False)
    static = torch.randn(TOKENS, HIDDEN, device=device, dtype=dtype)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            policy(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = policy(static)
    reference = {name: p.clone() for name, p in policy.named_parameters()}   # the KL reference: a copy
    generator = torch.Generator().manual_seed(1)
    errors = []
    for _ in range(STEPS):
        sync_weights(policy, trained(reference, generator))
        x = torch.randn(TOKENS, HIDDEN, generator=generator).to(device, dtype)
        static.copy_(x)
        graph.replay()
        errors.append(error(out, policy(x)))
    torch.cuda.synchronize()
    return errors
