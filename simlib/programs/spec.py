"""The MoE scenario, described once as plain data, for the simulator and the GPU.

``MoEConfig`` names one configuration of the dual-stream MoE decode step of
docs/design.md: which branch the host issues first under capture, how the shared
branch consumes the layer input, what ``dispose_tensor`` does, and how the
replays get their inputs. ``simlib.programs.scenarios`` builds a simulated program from
it and ``gpu_demo`` builds a real PyTorch run from the very same object, so the
two sides cannot drift apart. ``MATRIX`` is the conformance matrix both run.

What a configuration did is said in the outcome words of ``simlib.glossary``
(``correct``, ``silent_wrong``, ...), their only home.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..engine.graph import CAPTURE_MODES

ORDERS = ("shared_first", "routed_first")
ROUTED_STREAMS = ("main", "alt")
SHARED_MODES = ("plain", "static_buffer", "raw_kernel")
DISPOSE_POLICIES = ("always", "skip_in_capture", "own_buffer", "never")
DISPOSE_KINDS = (
    "set_empty",        # x.set_(torch.empty((0,))): shape (0,), pointer 0 (SGLang)
    "set_scalar",       # x.set_(torch.empty([])): a 0-dim tensor in a 2-byte block
    "resize_storage",   # x.untyped_storage().resize_(0): pointer 0, shape kept (FSDP)
)
INPUT_MODES = ("fresh", "stale", "same_as_eager")
CAPTURE_FAULTS = (
    "none",
    "device_sync",           # torch.cuda.synchronize() inside capture
    "item",                  # a host read of a device value (.item()) inside capture
    "unjoined",              # the alternate stream never joins back
    "uncaptured_wait",       # a capturing stream waits on an event recorded outside
    "query_captured_event",  # event.query() on an event recorded inside the capture
    "missing_fork",          # the alternate stream never waits on the capture, then joins
)


def _choice(field_name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(
            f"{field_name}={value!r} is not a valid choice; use one of: "
            + ", ".join(repr(a) for a in allowed)
        )


@dataclass(frozen=True)
class MoEConfig:
    """One configuration of the dual-stream MoE decode step.

    order          which branch the host issues first inside the capture
    shared_mode    how the shared expert consumes the layer input ``x``:
                   ``plain`` torch ops merged with ``+``; ``static_buffer``, writes
                   into a pre-zeroed output buffer and skips compute when ``x``
                   has no rows; ``raw_kernel``, a raw-pointer kernel sized by the
                   static batch
    dispose        ``always`` (the incident), ``skip_in_capture``, ``own_buffer``
                   (dispose only the routed path's own permuted copy, after use)
                   or ``never``
    clone          the shared branch reads a clone of ``x`` taken before the fork
    inputs         ``fresh`` (copied into the captured input buffer before every
                   replay), ``stale`` (never copied) or ``same_as_eager``
    capture_fault  a deliberate capture mistake (``none`` for a clean capture)
    routed_stream  where the routed experts run under capture: ``main`` (after
                   SGLang PR #29142, so they can feed the residual add with PDL)
                   or ``alt`` (before it; the shared expert then runs on main)
    pdl            launch the residual add with programmatic dependent launch
    dispose_kind   how ``dispose_tensor`` frees a tensor (``DISPOSE_KINDS``)
    capture_mode   ``torch.cuda.graph``'s ``capture_error_mode``
                   (``simlib.engine.graph.CAPTURE_MODES``; PyTorch's default is ``global``)
    alt_delay_us   under capture, a kernel that only waits this long
                   (``torch.cuda._sleep``) heads the branch on the alternate
                   stream: how a slower branch makes a race bite
    record_stream  under capture, ``x.record_stream(alt)`` before the branches, so
                   the caching allocator keeps ``x``'s block until the capture ends
    """

    order: str = "routed_first"
    shared_mode: str = "static_buffer"
    dispose: str = "always"
    clone: bool = False
    inputs: str = "fresh"
    capture_fault: str = "none"
    layers: int = 1
    tokens: int = 16
    hidden: int = 512
    intermediate: int = 1024
    experts: int = 8
    top_k: int = 2
    replays: int = 3
    pdl: bool = False
    routed_stream: str = "main"
    dispose_kind: str = "set_empty"
    capture_mode: str = "global"
    alt_delay_us: float = 0.0
    record_stream: bool = False

    def __post_init__(self) -> None:
        _choice("order", self.order, ORDERS)
        _choice("shared_mode", self.shared_mode, SHARED_MODES)
        _choice("dispose", self.dispose, DISPOSE_POLICIES)
        _choice("dispose_kind", self.dispose_kind, DISPOSE_KINDS)
        _choice("inputs", self.inputs, INPUT_MODES)
        _choice("capture_fault", self.capture_fault, CAPTURE_FAULTS)
        _choice("capture_mode", self.capture_mode, CAPTURE_MODES)
        _choice("routed_stream", self.routed_stream, ROUTED_STREAMS)
        delay = self.alt_delay_us
        if (not isinstance(delay, int | float) or isinstance(delay, bool) or not math.isfinite(delay)
                or delay < 0):
            raise ValueError(f"alt_delay_us must be a number of microseconds >= 0, got {delay!r}")
        for name in ("clone", "pdl", "record_stream"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("layers", "tokens", "hidden", "intermediate", "experts", "top_k", "replays"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.layers > 61:
            raise ValueError(f"layers={self.layers} is too many; DeepSeek-V3 has 61 layers (use 1 to 61)")
        if self.top_k > self.experts:
            raise ValueError(
                f"top_k={self.top_k} is larger than experts={self.experts}; "
                f"a token cannot pick more experts than exist (use top_k <= {self.experts})"
            )

    @property
    def name(self) -> str:
        """A short, stable identifier, e.g. ``routed_first/static_buffer/always``."""
        parts = [self.order, self.shared_mode, self.dispose]
        if self.dispose_kind != "set_empty":
            parts.append(self.dispose_kind)
        if self.clone:
            parts.append("clone")
        if self.inputs != "fresh":
            parts.append(f"inputs={self.inputs}")
        if self.capture_fault != "none":
            parts.append(f"fault={self.capture_fault}")
        if self.capture_mode != "global":
            parts.append(f"mode={self.capture_mode}")
        if self.record_stream:
            parts.append("record_stream")
        if self.alt_delay_us:
            parts.append(f"alt_delay={self.alt_delay_us:g}us")
        if self.replays != 3:
            parts.append(f"replays={self.replays}")
        return "/".join(parts)

    def with_(self, **changes: Any) -> "MoEConfig":
        """A copy with some options changed (validated like the original)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(
                f"unknown option(s) {sorted(unknown)}; valid options: "
                + ", ".join(f.name for f in fields(self))
            )
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MoEConfig":
        return cls().with_(**data)


def _matrix() -> tuple[MoEConfig, ...]:
    base = MoEConfig()
    rows: list[MoEConfig] = []
    # docs/results.md's measured H200 table: both orders x three shared modes.
    for order in ORDERS:
        for mode in SHARED_MODES:
            rows.append(base.with_(order=order, shared_mode=mode))
    # Every fix, applied to the routed-first order in the silent mode and the fault mode.
    for mode in ("static_buffer", "raw_kernel"):
        for dispose in ("skip_in_capture", "own_buffer", "never"):
            rows.append(base.with_(shared_mode=mode, dispose=dispose))
        rows.append(base.with_(shared_mode=mode, clone=True))
    # Input handling: the stale-buffer trap and a forgotten refresh.
    for order in ORDERS:
        for inputs in ("stale", "same_as_eager"):
            rows.append(base.with_(order=order, inputs=inputs))
    # The capture errors docs/design.md lists, on an otherwise correct program.
    for fault in CAPTURE_FAULTS[1:]:
        rows.append(base.with_(order="shared_first", capture_fault=fault))
    # A missing fork in the other capture modes: which call each one refuses first.
    for mode in CAPTURE_MODES[1:]:
        rows.append(base.with_(order="shared_first", capture_fault="missing_fork", capture_mode=mode))
    # Other ways to dispose: the storage freed with the shape kept (FSDP), set_ to a 0-dim tensor.
    for mode in SHARED_MODES:
        rows.append(base.with_(shared_mode=mode, dispose_kind="resize_storage"))
    for mode in ("plain", "raw_kernel"):
        rows.append(base.with_(shared_mode=mode, dispose_kind="set_scalar"))
    # The reorder fix's race, made to bite by a slower alternate branch; many replays give a
    # rate of wrong ones. record_stream keeps x's block out of reach and fixes it.
    race = base.with_(order="shared_first", replays=200)
    for delay in (0.0, 20.0, 100.0):
        rows.append(race.with_(alt_delay_us=delay))
    rows.append(race.with_(alt_delay_us=100.0, record_stream=True))
    return tuple(rows)


MATRIX: tuple[MoEConfig, ...] = _matrix()
