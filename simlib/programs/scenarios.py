"""The dual-stream MoE decode step of docs/design.md, as a simulated program.

``run(MoEConfig(...))`` does what ``gpu_demo``'s harness does on a real GPU:
set up static buffers, warm up eagerly, capture one decode step, replay it
``config.replays`` times with new inputs, and compare every replay with an
eager run of the same program on the input the caller meant. It is a program
of ``simlib.programs.harness`` (``build``), run by its ``Session``; the outcome
is a word of ``simlib.glossary``.

The program mirrors SGLang: the dual-stream path is taken only while
capturing; eager runs (warm-up, the reference) go shared expert first, then
routed experts, on one stream, which is always correct.

``play(rt, cfg)`` does the same on a runtime the caller made, which is how
``simlib.engine.schedules.explore`` replays one configuration under other schedules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from ..engine.runtime import Runtime
from ..engine.stream import Event, Stream
from ..engine.tensor import TensorHandle, raw
from ..engine.timing import Profile
from ..engine.values import Call, Expr
from .harness import Build, Program, ProgramResult, Session
from .spec import MoEConfig

WARMUPS = 1     # eager calls before the capture


def stage(block: str, k: int, n: int) -> Callable[..., Expr]:
    """Value function of the k-th of n kernels that together compute ``block(x)``.

    Intermediate buffers hold ``block[k/n](x)``; the last kernel yields
    ``block(x)``. If a kernel reads something that is not its predecessor's
    output (a stale or foreign buffer) the chain shows it explicitly.
    """
    def fn(v: Expr, *_: Expr) -> Expr:
        if k == 1:
            inner = v
        elif isinstance(v, Call) and v.fn == f"{block}[{k - 1}/{n}]":
            inner = v.args[0]
        else:
            return Call(f"{block}.step{k}", (v,))
        return Call(block, (inner,)) if k == n else Call(f"{block}[{k}/{n}]", (inner,))
    return fn


@dataclass
class MoELayer:
    """One MoE layer: its static buffers and its forward pass."""

    rt: Runtime
    cfg: MoEConfig
    alt: Stream
    index: int
    shared_buf: TensorHandle | None = None

    def __post_init__(self) -> None:
        if self.cfg.shared_mode == "static_buffer":
            c = self.cfg
            self.shared_buf = self.rt.zeros((c.tokens, c.hidden), self._name("shared_out"))

    def _name(self, what: str) -> str:
        return what if self.cfg.layers == 1 else f"L{self.index}.{what}"

    def forward(self, h: TensorHandle, capturing: bool, dual_stream: bool = True) -> TensorHandle:
        rt, c = self.rt, self.cfg
        x = rt.op("norm", h, out_shape=h.shape, role="norm", label=self._name("x"),
                  fn=lambda v: Call("norm", (v,)))
        if not (capturing and dual_stream):
            shared = self._shared(x)
            routed = self._routed(x, capturing)
            return self._merge(h, routed, shared, x)
        main = rt.current_stream
        x_shared = rt.clone(x, self._name("x_clone")) if c.clone else x
        routed_s, shared_s = (main, self.alt) if c.routed_stream == "main" else (self.alt, main)
        if c.capture_fault != "missing_fork":
            self.alt.wait_stream(main)                                 # fork
        if c.record_stream:
            x.record_stream(self.alt)
        if c.capture_fault == "device_sync":
            rt.synchronize()
        if c.capture_fault == "query_captured_event":
            self.alt.record_event().query()
        results: dict[str, TensorHandle] = {}
        branches = {"shared": lambda: self._shared(x_shared),
                    "routed": lambda: self._routed(x, capturing=True)}
        first, second = ("shared", "routed") if c.order == "shared_first" else ("routed", "shared")
        for name in (first, second):
            stream = shared_s if name == "shared" else routed_s
            with rt.stream(stream):
                if stream is self.alt and c.alt_delay_us:
                    rt.sleep(c.alt_delay_us, label=self._name("alt_delay"))   # torch.cuda._sleep
                results[name] = branches[name]()
        if c.capture_fault != "unjoined":
            main.wait_stream(self.alt)                                 # join
        temporaries = (x, x_shared) if c.clone else (x,)
        return self._merge(h, results["routed"], results["shared"], *temporaries)

    def _shared(self, x: TensorHandle) -> TensorHandle:
        """The shared SwiGLU expert, consuming ``x`` the way ``shared_mode`` says."""
        rt, c = self.rt, self.cfg
        T, H, I = c.tokens, c.hidden, c.intermediate
        n = self._name
        if c.shared_mode == "raw_kernel":
            up = rt.empty((T, 2 * I), n("shared.gate_up"))
            rt.launch("shared_gate_up_triton", reads=[raw(x, T * H)], writes=[up], role="shared",
                      label=n("shared.gate_up"), fn=stage("shared", 1, 3))
        elif c.shared_mode == "static_buffer":
            # x.view(-1, H): an emptied x becomes 0 rows, so every op below covers zero
            # elements and launches nothing; the static buffer keeps what it had.
            assert self.shared_buf is not None
            rows = x.numel // H
            xv = rt.view(x, (rows, H), label=n("x_rows"))
            up = rt.linear("shared.gate_up", xv, H, 2 * I, role="shared", label=n("shared.gate_up"),
                           fn=stage("shared", 1, 3))
            act = rt.op("shared.act", up, out_shape=(rows, I), role="shared", label=n("shared.act"),
                        fn=stage("shared", 2, 3))
            out = rt.view(self.shared_buf, (rows, H), label=n("shared_out_rows"))
            rt.linear("shared.down", act, I, H, role="shared", label=n("shared.down"),
                      fn=stage("shared", 3, 3), out=out)
            self._drop(xv, up, act, out)
            return self.shared_buf
        else:
            up = rt.linear("shared.gate_up", x, H, 2 * I, role="shared", label=n("shared.gate_up"),
                           fn=stage("shared", 1, 3))
        act = rt.op("shared.act", up, out_shape=(T, I), role="shared", label=n("shared.act"),
                    fn=stage("shared", 2, 3))
        shared = rt.linear("shared.down", act, I, H, role="shared", label=n("shared.down"),
                           fn=stage("shared", 3, 3))
        self._drop(up, act)
        return shared

    def _routed(self, x: TensorHandle, capturing: bool) -> TensorHandle:
        """Router gate, top-k, pre-permute (then dispose), grouped experts, combine."""
        rt, c = self.rt, self.cfg
        T, H, I, E, k = c.tokens, c.hidden, c.intermediate, c.experts, c.top_k
        n = self._name
        logits = rt.linear("gate", x, H, E, role="gate", label=n("router_logits"))
        if capturing and c.capture_fault == "item":
            rt.item(logits)
        topk = rt.op("topk", logits, out_shape=(T, k), role="topk", label=n("topk"))
        self._drop(logits)
        xp = rt.op("permute", x, topk, out_shape=(T * k, H), role="copy", label=n("x_permuted"),
                   fn=stage("routed", 1, 5))
        if c.dispose == "always" or (c.dispose == "skip_in_capture" and not capturing):
            self._dispose(x, "dispose_tensor(x) after the pre-permute copy")
        up = rt.op("experts.gate_up", xp, out_shape=(T * k, 2 * I), role="routed",
                   label=n("experts.gate_up"), fn=stage("routed", 2, 5))
        if c.dispose == "own_buffer":
            self._dispose(xp, "dispose_tensor(permuted copy) after its last use")
        act = rt.op("experts.act", up, out_shape=(T * k, I), role="routed", label=n("experts.act"),
                    fn=stage("routed", 3, 5))
        down = rt.op("experts.down", act, out_shape=(T * k, H), role="routed",
                     label=n("experts.down"), fn=stage("routed", 4, 5))
        routed = rt.op("combine", down, topk, out_shape=(T, H), role="routed",
                       label=n("routed_out"), fn=stage("routed", 5, 5))
        self._drop(xp, up, act, down, topk)
        return routed

    def _dispose(self, t: TensorHandle, why: str) -> None:
        """``dispose_tensor(t)``, the way ``cfg.dispose_kind`` says (``simlib.programs.spec.DISPOSE_KINDS``)."""
        rt, kind = self.rt, self.cfg.dispose_kind
        if kind == "set_empty":
            rt.set_(t, None, why=why)
        elif kind == "set_scalar":
            scalar = rt.empty((), f"{t.label}.scalar", itemsize=t.itemsize)   # torch.empty([])
            rt.set_(t, scalar, why=why)
            rt.release(scalar)
        else:
            rt.resize_storage_(t, 0, why=why)

    def _merge(self, h: TensorHandle, routed: TensorHandle, shared: TensorHandle,
               *temporaries: TensorHandle) -> TensorHandle:
        out = self.rt.add(h, routed, shared, label=self._name("residual_add"), pdl=self.cfg.pdl)
        self._drop(routed, *temporaries, *([] if shared is self.shared_buf else [shared]))
        return out

    def _drop(self, *tensors: TensorHandle) -> None:
        """Python drops these locals here: release them as CPython's refcounting would."""
        for t in tensors:
            self.rt.release(t)


class MoEModel:
    """``cfg.layers`` MoE layers sharing two streams, like one decode step."""

    def __init__(self, rt: Runtime, cfg: MoEConfig, main: Stream) -> None:
        self.rt, self.cfg = rt, cfg
        self.alt = rt.Stream("alt")
        with rt.stream(main):
            self.layers = [MoELayer(rt, cfg, self.alt, i) for i in range(cfg.layers)]

    def forward(self, h: TensorHandle, capturing: bool, dual_stream: bool = True) -> TensorHandle:
        for layer in self.layers:
            h = layer.forward(h, capturing, dual_stream)
        return h


@dataclass(kw_only=True)
class ScenarioResult(ProgramResult):
    """What the harness showed for one configuration of the MoE step: a ``ProgramResult`` and its ``config``."""

    config: MoEConfig

    def __repr__(self) -> str:
        return f"<ScenarioResult {self.config.name}: {self.outcome}>"


def build(cfg: MoEConfig, *, dual_stream: bool = True) -> Build:
    """The decode step as a harness program: one graph, ``decode_step``, captured on ``main``.

    The warm-up and the capture run on ``x1``, the input loaded with the model; each replay's
    call is fed the next fresh input (``x2``, ``x3``, ...; ``x1`` again for ``same_as_eager``),
    copied into the static input buffer. A ``stale`` caller forgets the copy and hands the new
    input straight to the model, which only an eager call reads.
    """
    def program(rt: Runtime) -> Mapping[str, Program]:
        main = rt.Stream("main")
        model = MoEModel(rt, cfg, main)
        with rt.stream(main):
            h = rt.from_host((cfg.tokens, cfg.hidden), "hidden_in", value="x1")
        given = [h]                     # the tensor the caller hands the model this call
        outside: list[Event] = []       # an event the warm-up recorded, for the uncaptured_wait fault

        def feed(k: int) -> str | None:
            if k <= WARMUPS + 1:
                return None
            value = "x1" if cfg.inputs == "same_as_eager" else f"x{k - WARMUPS}"
            new = rt.from_host(h.shape, f"input_{value}", value=value)
            if cfg.inputs == "stale":
                given[0] = new
            else:
                h.copy_(new)
            return value

        def forward() -> TensorHandle:
            capturing = rt.is_current_stream_capturing()
            if capturing and outside:
                main.wait_event(outside[0])
            out = model.forward(given[0], capturing, dual_stream)
            if not capturing and cfg.capture_fault == "uncaptured_wait":
                outside[:] = [main.record_event()]
            return out
        return {"decode_step": Program(forward, feed, [h], stream=main, capture_error_mode=cfg.capture_mode)}
    return program


def run(cfg: MoEConfig | None = None, profile: Profile | None = None, *,
        dual_stream: bool = True) -> ScenarioResult:
    """Warm up, capture and replay ``cfg``; classify what happened.

    ``dual_stream=False`` captures the one-stream path instead (the baseline
    that overlap is measured against).
    """
    return play(Runtime(profile), cfg or MoEConfig(), dual_stream=dual_stream)


def play(rt: Runtime, cfg: MoEConfig, *, dual_stream: bool = True) -> ScenarioResult:
    """``run`` on a runtime the caller made (with a schedule, say)."""
    session = Session(build(cfg, dual_stream=dual_stream), runtime=rt)
    session.warm_up(calls=WARMUPS)
    session.capture()
    for _ in range(cfg.replays):
        session.replay()
    return ScenarioResult(**vars(session.result()), config=cfg)
