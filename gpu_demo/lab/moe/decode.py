"""An accuracy proxy: greedy decoding through captured MoE layers versus eager.

The incident showed up as gsm8k accuracy falling from about 0.66 to 0.005.
There is no trained model here, so this proxy measures the same kind of
damage without claiming to be accuracy: a tiny decoder (embedding, ``layers``
MoE layers, final norm, LM head; random weights from a fixed seed) decodes
greedily for ``steps`` steps, once by replaying a CUDA graph of one decode step
and once eagerly. The reported number is the **token agreement with eager**:
the fraction of generated tokens that are equal. Once a wrong token is fed
back, the two sequences diverge, as a real generation would.

The graph is warmed up on a different batch of tokens than the one decoding
starts from (as a server warms up on dummy input), so a stale buffer from the
warm-up cannot pass for the right answer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpu_demo.guard.protocol import capture_replay
from gpu_demo.guard.protocol.child import Checkpoint
from gpu_demo.guard.protocol.cuda_errors import classify_capture_failure, first_error, is_illegal_address, one_line
from gpu_demo.lab.moe.model import MoEStack, RMSNorm, _Init, label_tensors
from gpu_demo.lab.moe.settings import RunSettings
from simlib.glossary import ILLEGAL_ADDRESS
from simlib.programs.spec import MoEConfig

VOCAB = 512
DECODED = "decoded"


class TinyDecoder(nn.Module):
    """tokens [T] -> next tokens [T] (greedy), through ``config.layers`` MoE layers."""

    def __init__(self, config: MoEConfig, settings: RunSettings, vocab: int = VOCAB) -> None:
        super().__init__()
        init = _Init(settings, torch.Generator().manual_seed(settings.seed + 100))
        self.embed = init.parameter(vocab, config.hidden, fan_in=1)
        self.moe = MoEStack(config, settings)
        self.norm = RMSNorm(config.hidden, init)
        self.head = init.parameter(vocab, config.hidden, fan_in=config.hidden)
        label_tensors(self)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.moe(F.embedding(tokens, self.embed))
        return F.linear(self.norm(hidden), self.head).argmax(dim=-1)


@dataclass
class DecodeResult:
    """Token agreement of graph-replay decoding with eager decoding."""

    config: dict[str, Any]
    steps: int
    sequences: int
    status: str  # "decoded", or what stopped it: capture_error:<name>, illegal_address
    token_agreement: float | None
    first_divergence_step: int | None
    message: str | None = None


def decode_agreement(config: MoEConfig, settings: RunSettings, steps: int) -> DecodeResult:
    """Decode ``steps`` steps by graph replay and eagerly; compare the tokens."""
    device = settings.torch_device
    model, reference = TinyDecoder(config, settings), TinyDecoder(config, settings)
    generator = torch.Generator().manual_seed(settings.seed + 2)
    start = torch.randint(VOCAB, (config.tokens,), generator=generator).to(device)
    dummy = torch.randint(VOCAB, (config.tokens,), generator=generator).to(device)

    def result(status: str, agreement: float | None = None, divergence: int | None = None,
               exc: BaseException | None = None) -> DecodeResult:
        return DecodeResult(config.to_dict(), steps, config.tokens, status, agreement, divergence,
                            one_line(exc) if exc else None)

    with torch.no_grad():
        eager, tokens = [], start.clone()
        for _ in range(steps):
            tokens = reference(tokens)
            eager.append(tokens)
        static_tokens = dummy.clone()
        capture_replay.warm_up(lambda: model(static_tokens))
        try:
            graph, static_next = capture_replay.capture(lambda: model(static_tokens))
        except Exception as exc:
            first = first_error(exc)
            return result(classify_capture_failure(first), exc=first)
        static_tokens.copy_(start)
        replayed = []
        try:
            for _ in range(steps):
                graph.replay()
                replayed.append(static_next.clone())
                static_tokens.copy_(static_next)
            torch.cuda.synchronize()
        except RuntimeError as exc:
            if not is_illegal_address(exc):
                raise
            return result(ILLEGAL_ADDRESS, exc=exc)
        same = torch.stack(replayed) == torch.stack(eager)  # [steps, T]
        wrong_steps = (~same).any(dim=1).nonzero()
        divergence = int(wrong_steps[0]) if len(wrong_steps) else None
        return result(DECODED, float(same.float().mean()), divergence)


def decode_payload(payload: dict[str, Any], checkpoint: Checkpoint) -> dict[str, Any]:
    """Child-process entry (``gpu_demo.guard.protocol.child``)."""
    config = MoEConfig.from_dict(payload["config"])
    return asdict(decode_agreement(config, RunSettings(**payload["settings"]), payload["steps"]))


def decode_suite(base: MoEConfig) -> list[MoEConfig]:
    """The configurations ``python -m gpu_demo decode`` compares by default:
    the incident, its order fix and every other fix, in the silent mode."""
    silent = base.with_(shared_mode="static_buffer", dispose="always", clone=False,
                        inputs="fresh", capture_fault="none")
    return [
        silent.with_(order="shared_first"),
        silent.with_(order="routed_first"),
        *(silent.with_(order="routed_first", dispose=d) for d in ("skip_in_capture", "own_buffer", "never")),
        silent.with_(order="routed_first", clone=True),
    ]
