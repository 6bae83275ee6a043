"""A DeepSeek-V3-style MoE layer whose two branches can run on two streams.

The layer computes ``residual + routed(x) + shared(x)`` with ``x = rmsnorm(residual)``:

* the *router* (gate GEMM, softmax, top-k) picks ``top_k`` experts per token;
* the *routed experts* copy ``x`` into an ``[experts, capacity, hidden]``
  buffer (the pre-permute step, which then calls ``dispose_tensor(x)`` as
  DeepGEMM's does), run two batched GEMMs over all experts at once, and sum
  each token's rows weighted by the router probabilities;
* the *shared expert* is a SwiGLU MLP every token goes through.

Everything has static shapes and no host syncs, so it can be captured into a
CUDA graph. Capacity is ``tokens``: top-k picks distinct experts, so no expert
can get more than one row per token.

Like SGLang, the layer forks onto two streams only while the current stream
is being captured: the shared expert on the alternate stream, the routed
experts on main, joined before the merge. ``order`` then decides which branch
the *host* issues first. Outside capture (warm-up, the eager reference) it runs
on one stream, shared expert first, which is always correct.

Under capture, ``alt_delay_us`` puts a ``torch.cuda._sleep`` kernel at the head of
the alternate stream's branch (its cycles per microsecond timed on this GPU
first), and ``record_stream`` records ``x``'s use on the alternate stream.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpu_demo.guard.record import annotate
from gpu_demo.guard.record.annotate import ALT, MAIN, label, role
from gpu_demo.guard.record.dry_run import is_capturing
from gpu_demo.lab.moe.dual_streams import DualStreams
from gpu_demo.lab.moe.faults import CaptureFaults
from gpu_demo.lab.moe.kernels import swiglu
from gpu_demo.lab.moe.settings import RunSettings
from simlib.programs.spec import MoEConfig


def dispose_tensor(x: torch.Tensor, kind: str = "set_empty") -> None:
    """Free ``x``'s memory early, on the host (``simlib.programs.spec.DISPOSE_KINDS``).

    No kernel runs, and every later launch that takes ``x`` freezes what is left:
    ``set_empty`` (SGLang) repoints ``x`` at an empty storage: 0 elements,
    ``data_ptr() == 0``; ``set_scalar`` repoints it at a 0-dim tensor, one
    element in a tiny block; ``resize_storage`` (FSDP) frees the storage and
    keeps the shape: ``data_ptr() == 0`` with all its elements.
    """
    with annotate.because("dispose_tensor"):
        if kind == "set_empty":
            x.set_(torch.empty((0,), device=x.device, dtype=x.dtype))
        elif kind == "set_scalar":
            x.set_(torch.empty([], device=x.device, dtype=x.dtype))
        elif kind == "resize_storage":
            x.untyped_storage().resize_(0)
        else:
            raise ValueError(f"dispose kind {kind!r} is not one of set_empty, set_scalar, resize_storage")


def sleep_cycles_per_us(cycles: int = 200_000, trials: int = 5) -> float:
    """``torch.cuda._sleep`` cycles per microsecond on this GPU, timed with CUDA events.

    The fastest of a few trials: another process sharing the GPU can only make
    a trial look slower, which would make the delay built from it too short.
    """
    torch.cuda._sleep(cycles)                                  # warm-up
    rates = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        rates.append(cycles / (start.elapsed_time(end) * 1000.0))
    return max(rates)


def _weight(generator: torch.Generator, *shape: int, fan_in: int) -> torch.Tensor:
    """Seeded random weights with unit-variance outputs, made on the CPU so that
    every run (and the eager reference) gets the same numbers on any device."""
    return torch.randn(*shape, generator=generator) / math.sqrt(fan_in)


class _Init:
    """Where and how a layer's tensors are made."""

    def __init__(self, settings: RunSettings, generator: torch.Generator) -> None:
        self.device = settings.torch_device
        self.dtype = settings.torch_dtype
        self.generator = generator

    def parameter(self, *shape: int, fan_in: int) -> nn.Parameter:
        data = _weight(self.generator, *shape, fan_in=fan_in)
        return nn.Parameter(data.to(self.device, self.dtype), requires_grad=False)

    def zeros(self, *shape: int) -> torch.Tensor:
        return torch.zeros(*shape, device=self.device, dtype=self.dtype)


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, init: _Init, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, device=init.device, dtype=init.dtype), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Router(nn.Module):
    """Gate GEMM, softmax and top-k: ``(weights [T, k] float32, expert ids [T, k])``."""

    def __init__(self, config: MoEConfig, init: _Init) -> None:
        super().__init__()
        self.weight = init.parameter(config.experts, config.hidden, fan_in=config.hidden)
        self.top_k = config.top_k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with role("gate"):
            logits = F.linear(x, self.weight)
        with role("topk"):
            weights, ids = logits.float().softmax(dim=-1).topk(self.top_k, dim=-1)
            return weights / weights.sum(dim=-1, keepdim=True), ids


class RoutedExperts(nn.Module):
    """Only the selected experts, grouped by expert with static shapes."""

    def __init__(self, config: MoEConfig, init: _Init) -> None:
        super().__init__()
        e, h, i = config.experts, config.hidden, config.intermediate
        self.w_gate_up = init.parameter(e, h, 2 * i, fan_in=h)
        self.w_down = init.parameter(e, i, h, fan_in=i)
        self.experts, self.hidden, self.capacity = e, h, config.tokens
        self.tokens, self.top_k = config.tokens, config.top_k
        self.dispose, self.dispose_kind = config.dispose, config.dispose_kind
        assignments = torch.arange(config.tokens * config.top_k, device=init.device)
        self.register_buffer("token_of_assignment", assignments // config.top_k, persistent=False)
        self.register_buffer("expert_index", torch.arange(e, device=init.device), persistent=False)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        with role("permute"):
            expert = ids.reshape(-1)
            chosen = (expert[:, None] == self.expert_index).to(torch.int32)  # [T*k, E]
            position = (chosen.cumsum(dim=0) * chosen).sum(dim=-1) - 1  # rank within its expert
            slot = expert * self.capacity + position
            rows = self.experts * self.capacity
            permuted = label(torch.zeros(rows, self.hidden, device=x.device, dtype=x.dtype), "permuted")
            permuted.index_copy_(0, slot, x.index_select(0, self.token_of_assignment))
            if self.dispose == "always" or (self.dispose == "skip_in_capture" and not is_capturing()):
                dispose_tensor(x, self.dispose_kind)
        with role("routed_experts"):
            gate, up = torch.bmm(permuted.view(self.experts, self.capacity, self.hidden), self.w_gate_up).chunk(2, -1)
            if self.dispose == "own_buffer":
                dispose_tensor(permuted, self.dispose_kind)
            y = torch.bmm(F.silu(gate) * up, self.w_down)
        with role("combine"):
            rows = y.view(-1, self.hidden).index_select(0, slot).view(self.tokens, self.top_k, self.hidden)
            return (rows.float() * weights.unsqueeze(-1)).sum(dim=1).to(y.dtype)


class SharedExpert(nn.Module):
    """The SwiGLU expert every token goes through, in one of three ways of reading ``x``.

    ``plain``          plain torch ops on ``x``
    ``static_buffer``  one fused op writing into ``out``, zeroed once here; it
                       does nothing when ``x`` has no rows, so ``out`` keeps
                       whatever it held
    ``raw_kernel``     a raw-pointer kernel copies ``tokens * hidden`` elements
                       from ``x``'s address into ``staged``; the MLP reads ``staged``
    """

    def __init__(self, config: MoEConfig, init: _Init) -> None:
        super().__init__()
        self.mode = config.shared_mode
        self.w_gate_up = init.parameter(2 * config.intermediate, config.hidden, fan_in=config.hidden)
        self.w_down = init.parameter(config.hidden, config.intermediate, fan_in=config.intermediate)
        if self.mode == "static_buffer":
            self.register_buffer("out", init.zeros(config.tokens, config.hidden), persistent=False)
        elif self.mode == "raw_kernel":
            self.register_buffer("staged", init.zeros(config.tokens, config.hidden), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "static_buffer":
            torch.ops.gpu_demo.shared_expert_into(x, self.w_gate_up, self.w_down, self.out)
            return self.out
        if self.mode == "raw_kernel":
            torch.ops.gpu_demo.raw_load(x, self.staged, self.staged.numel())
            x = self.staged
        return swiglu(x, self.w_gate_up, self.w_down)


class DualStreamMoELayer(nn.Module):
    """One MoE layer with its residual add; see the module docstring.

    Under capture the routed experts run on ``config.routed_stream`` and the
    shared expert on the other stream. ``dual_stream=False`` captures the
    single-stream path instead (the benchmark's baseline); it changes nothing
    that is computed.
    """

    def __init__(
        self,
        config: MoEConfig,
        streams: DualStreams,
        init: _Init,
        *,
        dual_stream: bool = True,
    ) -> None:
        super().__init__()
        self.norm = RMSNorm(config.hidden, init)
        self.router = Router(config, init)
        self.routed = RoutedExperts(config, init)
        self.shared = SharedExpert(config, init)
        self.streams = streams
        self.faults = CaptureFaults(config.capture_fault, streams)
        self.order, self.clone, self.pdl = config.order, config.clone, config.pdl
        self.record_stream = config.record_stream
        self.alt_delay_cycles = 0           # set by MoEStack from config.alt_delay_us
        self.dual_stream = dual_stream
        self.routed_on = config.routed_stream
        self.shared_on = ALT if config.routed_stream == MAIN else MAIN
        self.reduce: Callable[[torch.Tensor], torch.Tensor] | None = None   # set by gpu_demo.lab.distributed

    def forward(self, residual: torch.Tensor) -> torch.Tensor:
        with role("norm"):
            x = label(self.norm(residual), "x")
        if self.dual_stream and is_capturing():
            routed, shared = self._dual_stream(x)
        else:
            self.faults.prepare_outside_capture()
            with role("shared_expert"):
                shared = self.shared(x)
            routed = self._routed(x)
        with role("merge"):
            if self.reduce is not None:   # tensor parallel: the ranks' partial sums are added first
                return residual + self.reduce(routed + shared)
            if self.pdl:
                return torch.ops.gpu_demo.residual_add(residual, routed, shared)
            return residual + (routed + shared)

    def _routed(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = self.router(x)
        return self.routed(x, weights, ids)

    def _dual_stream(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shared_in = label(x.clone(), "x.clone") if self.clone else x
        out: dict[str, torch.Tensor] = {}

        def shared() -> None:
            with self.streams.on(self.shared_on), role("shared_expert"):
                self._delay(self.shared_on)
                out["shared"] = self.shared(shared_in)

        def routed() -> None:
            with self.streams.on(self.routed_on):
                self._delay(self.routed_on)
                out["routed"] = self._routed(x)

        first, second = (shared, routed) if self.order == "shared_first" else (routed, shared)
        if not self.faults.skips_fork:
            self.streams.fork()
        if self.record_stream and x.is_cuda:
            with self.streams.on(ALT):
                x.record_stream(torch.cuda.current_stream())
        first()
        self.faults.between_branches(probe=x)
        second()
        if not self.faults.skips_join:
            self.streams.join()
        return out["routed"], out["shared"]

    def _delay(self, stream: str) -> None:
        """Head the alternate stream's branch with a kernel that only waits."""
        if stream == ALT and self.alt_delay_cycles:
            torch.cuda._sleep(self.alt_delay_cycles)


class MoEStack(nn.Module):
    """``config.layers`` MoE layers on one residual stream, sharing one stream pair."""

    def __init__(
        self,
        config: MoEConfig,
        settings: RunSettings,
        *,
        dual_stream: bool = True,
    ) -> None:
        super().__init__()
        init = _Init(settings, torch.Generator().manual_seed(settings.seed))
        self.streams = DualStreams(init.device)
        self.layers = nn.ModuleList(
            DualStreamMoELayer(config, self.streams, init, dual_stream=dual_stream)
            for _ in range(config.layers)
        )
        if config.alt_delay_us and init.device.type == "cuda":
            cycles = round(config.alt_delay_us * sleep_cycles_per_us())
            for layer in self.layers:
                layer.alt_delay_cycles = cycles
        label_tensors(self)

    def forward(self, residual: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            residual = layer(residual)
        return residual


def label_tensors(module: nn.Module) -> None:
    """Label every parameter and buffer with its dotted name (for traces)."""
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        label(tensor, name)
