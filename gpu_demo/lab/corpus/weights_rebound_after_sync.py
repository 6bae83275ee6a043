"""An RL weight sync rebinds each parameter after the decode graph was captured (vLLM #48251, #40390, SGLang #4961).

A whole script, run as one (``CAPTURE_ORDER_CHECK=1``). An inference engine
captures its policy's decode step at start-up and replays it for rollouts;
between rollout steps the trainer syncs new weights in the way the threads'
reload paths did: ``setattr(module, name, nn.Parameter(new))``, a new tensor
on the module (vLLM's ``process_weights_after_loading`` rebinding derived
tensors, RFC #48941; SGLang's ``load_weights`` giving DeepSeek's
``w_kc``/``w_vc`` new addresses, #27140 and #32718 on memory-saver resume;
PEFT #2611's LoRA hot-swap). The trainer keeps the policy it started from as
the KL reference, so the old tensors stay alive and nothing is freed. A graph
holds the addresses it was captured with, not the attributes: every replay
after the sync computes with the old policy.

Hazardous: every rollout step after a sync comes from the stale policy
(``silent_wrong``); checker rule 14 (``weights_rebound``) names the rebound
parameters at the first replay after the sync.
"""

import torch
import torch.nn.functional as F

EXPECTED = "hazardous"
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
    """The engine's weight sync: each parameter replaced by a new one."""
    for name, new in new_state.items():
        owner, _, leaf = name.rpartition(".")
        setattr(policy.get_submodule(owner), leaf, torch.nn.Parameter(new, requires_grad=False))


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
    reference = dict(policy.named_parameters())   # the KL reference: the starting policy, kept alive
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
