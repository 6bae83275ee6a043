"""Your own program in the simulator: warm up, capture, replay with fresh inputs, compare with eager.

A program is what ``build(rt)`` returns for a runtime: a ``Program`` (one
graph) or a mapping of names to programs (several graphs over one model, one
per batch size, say). A ``Program`` has

``forward()``   the code under capture: reads the static inputs, returns the output
``feed(k)``     the host code before call ``k`` (every call and every replay, eagerly):
                copies the ``k``-th fresh input into the static buffers, updates
                host state (a step counter, a list of positions); it may return the
                fresh input's name, which the replay of that call reports (``Replayed.input``)
``after(k, out)`` the host code after call ``k`` ran (a warm-up or a replay; the
                capture's call computes nothing), with that call's output: it may keep
                a reference (``kept.append(out)``, a view) or hand its output to the next
                program; what it returns, if anything, is what call ``k`` is compared by
                instead of the output (``rt.stack(kept)``: every step kept so far)
``inputs``      the static input buffers (for the checker's stale-input rule)
``generators``  generators registered with the graph (``register_generator_state``)
``stream``      the stream the program runs on and is captured on
                (``torch.cuda.graph(stream=...)``); ``None``: the capture's side stream
``capture_error_mode``  ``torch.cuda.graph``'s, for this program's capture

The harness builds the program twice, in two runtimes: one warms up,
captures and replays, as a CUDA-graph program does; the other runs every call
eagerly, which is what the program means, all but the capture's call: that
one runs nothing on the device, so the eager runtime only feeds it, and a
replay starts from the device state the warm-ups left in both. Keep per-call
host state in ``feed`` (it runs before every call in both runtimes);
``forward``'s host code runs in the capture's call only where it is
captured. Replay ``k`` is right when it computes what eager call ``k``
computed, and the outcome is a word of ``simlib.glossary``. Inputs are fresh
for every call (``x3`` in call 3), so a stale buffer cannot pass for a right
answer.

    def build(rt):
        x = rt.empty((8,), "x")
        step = [0]
        def feed(k):
            x.copy_(rt.from_host((8,), f"x{k}", value=f"x{k}"))
            step[0] = k
        return Program(lambda: rt.op("mul", x, out_shape=(8,), scalars={"scale": f"scale@{step[0]}"}),
                       feed, [x])

    run_program(build).outcome      # 'silent_wrong': replays compute mul(x5, scale@3), eager mul(x5, scale@5)

``Session`` is the same, step by step, for several graphs and any order of
replays and reads (``simlib.programs.gallery`` uses it for graphs sharing a pool,
``simlib.programs.scenarios`` for the MoE decode step). Given a ``runtime`` or a
``schedule`` (``simlib.engine.schedules.Schedule``), the session captures and
replays on it; ``explore_program(build)`` gives every outcome a program's races
allow, each with its schedule (``simlib.engine.schedules.explore``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..checker import Finding, check
from ..checker.verdict import verdict
from ..engine.errors import IllegalAddress, SimulatedError, first_error
from ..engine.generators import Generator
from ..engine.graph import GLOBAL, CapturedGraph
from ..engine.runtime import Runtime
from ..engine.schedules import Exploration, Schedule, explore
from ..engine.stream import Stream
from ..engine.tensor import TensorHandle
from ..engine.timing import Profile
from ..engine.values import Expr
from ..glossary import CORRECT, ILLEGAL_ADDRESS, SILENT_WRONG, capture_error, host_error, warmup_error
from ..trace import Trace

__all__ = ["Program", "Replayed", "ProgramResult", "Session", "explore_program", "run_program"]

ONE = "graph"     # the name of a build's only program


def _no_feed(k: int) -> None:
    """A program without inputs to refresh."""


@dataclass
class Program:
    """One graph's code: ``forward`` is captured, ``feed(k)`` runs eagerly before every call."""

    forward: Callable[[], TensorHandle]
    feed: Callable[[int], str | None] = _no_feed
    inputs: Sequence[TensorHandle] = ()
    # What the code does with the output once captured (``rt.weak_ref``, as vLLM keeps it); None: keep it.
    after_capture: Callable[[TensorHandle], TensorHandle] | None = None
    stream: Stream | None = None
    capture_error_mode: str = GLOBAL
    # Host code after each warm-up and replay, with the call's output; what it returns is compared instead.
    after: Callable[[int, TensorHandle], TensorHandle | None] | None = None
    generators: Sequence[Generator] = ()


Build = Callable[[Runtime], "Program | Mapping[str, Program]"]


@dataclass
class Replayed:
    """One replay of graph ``graph`` standing for call ``call``: what it computed, what eager computed.

    ``input`` names the fresh input that call was fed, where the program's ``feed`` says it.
    """

    graph: str
    call: int
    got: Expr
    want: Expr
    input: str | None = None

    @property
    def ok(self) -> bool:
        return self.got == self.want

    def __str__(self) -> str:
        mark = "==" if self.ok else "!="
        return f"{self.graph} replay for call {self.call}: {self.got} {mark} eager {self.want}"


@dataclass
class ProgramResult:
    """What the session showed: the outcome word, the replays, and the traced runtime."""

    outcome: str
    runtime: Runtime
    graphs: dict[str, CapturedGraph] = field(default_factory=dict)
    replays: list[Replayed] = field(default_factory=list)
    error: BaseException | None = None

    @property
    def trace(self) -> Trace:
        return self.runtime.trace

    @property
    def graph(self) -> CapturedGraph | None:
        return next(iter(self.graphs.values()), None)

    def findings(self) -> list[Finding]:
        """The checker's findings on the trace of the capturing runtime."""
        return check(self.trace)

    def verdict(self) -> str:
        """The outcome, ``unordered`` where the replays were right but the checker finds a race."""
        return verdict(self.outcome, self.findings())

    def __repr__(self) -> str:
        error = f" ({type(self.error).__name__}: {str(self.error)[:120]})" if self.error else ""
        return f"<ProgramResult {self.outcome}{error}, {len(self.replays)} replays>"


class _Stopped(BaseException):
    """The session has its outcome (an error): later steps do nothing. Not an ``Exception``, so
    the handlers of the user's errors let it through."""


class Session:
    """Two runtimes side by side: one captures and replays, one runs every call eagerly.

    Every step (``warm_up``, ``capture``, ``replay``) is one more call ``k`` of
    the program, fed ``k`` in both. An error ends the session with its outcome
    word; later steps are ignored, and ``result()`` says what happened.
    """

    def __init__(self, build: Build, profile: Profile | None = None, *, runtime: Runtime | None = None,
                 schedule: Schedule | None = None) -> None:
        if runtime is not None and schedule is not None:
            raise ValueError("give Session a runtime or a schedule, not both: the runtime carries its schedule")
        self.graphed = runtime or Runtime(profile, schedule=schedule)
        self.eager = Runtime(self.graphed.profile)
        self._programs = {rt: _programs(build(rt)) for rt in (self.graphed, self.eager)}
        self.calls = 0
        self.graphs: dict[str, CapturedGraph] = {}
        self._outputs: dict[str, TensorHandle] = {}
        self._result = ProgramResult(CORRECT, self.graphed, self.graphs)

    @property
    def names(self) -> list[str]:
        return list(self._programs[self.graphed])

    def warm_up(self, name: str | None = None, calls: int = 2) -> None:
        """``calls`` eager calls of the program, each its own ``Call``, before capturing it."""
        for _ in range(calls):
            self._step(lambda: self._warm_up_once(self._name(name)))

    def capture(self, name: str | None = None, *, pool_of: str | None = None) -> CapturedGraph | None:
        """Capture one call of the program (into graph ``pool_of``'s pool if given)."""
        self._step(lambda: self._capture_once(self._name(name), pool_of))
        return self.graphs.get(self._name(name))

    def replay(self, name: str | None = None, *, read: bool = True,
               copy_out: bool = False) -> Replayed | Callable[[], Replayed | None] | None:
        """Feed the next call and replay its graph; the eager runtime runs the call instead.

        Reading the output is a copy out of it (a launch, as ``.clone()`` or ``.cpu()``
        is), so the checker sees who read what. ``read=False`` defers it: call what is
        returned to read then (after other replays, say), the way a server reads a
        result later; ``copy_out=True`` clones the output right after the replay, and
        the read, whenever it comes, reads that copy.
        """
        name = self._name(name)
        pending: list[Callable[[], Replayed | None]] = []
        self._step(lambda: pending.append(self._replay_once(name, copy_out)))
        read_later = pending[0] if pending else (lambda: None)
        if read:
            return self._step(read_later)
        return lambda: self._step(read_later)

    def result(self) -> ProgramResult:
        return self._result

    # ------------------------------------------------------------------ steps
    def _name(self, name: str | None) -> str:
        names = self.names
        if name is None:
            if len(names) != 1:
                raise ValueError(f"this program has several graphs, {names}: say which one")
            return names[0]
        if name not in names:
            raise ValueError(f"no program named {name!r}; the build returned {names}")
        return name

    def _step(self, body: Callable[[], object]):
        if self._result.error is not None:
            return None
        try:
            return body()
        except _Stopped:
            return None

    def _stop(self, outcome: str, exc: BaseException) -> None:
        self._result.outcome, self._result.error = outcome, exc
        raise _Stopped

    def _both(self, name: str, wrap: Callable[[Runtime, Program], TensorHandle],
              failed: Callable[[BaseException], str], *, eager: bool = True) -> tuple[list[TensorHandle], str | None]:
        """Feed call ``k`` in both runtimes; run it in the capturing one (``wrap``) and, with
        ``eager``, in the eager one, each on the program's stream, then the program's ``after``
        (where the call computed something: ``eager``). Returns what each call is compared by
        and the name of the fresh input the capturing runtime was fed."""
        self.calls += 1
        k = self.calls
        out: list[TensorHandle] = []
        fed = None
        for rt in (self.graphed, self.eager):
            program = self._programs[rt][name]
            with _on(rt, program.stream):
                try:
                    named = program.feed(k)
                except IllegalAddress as exc:       # sticky: a replay faulted, and every later call fails
                    self._stop(ILLEGAL_ADDRESS, exc)
                except Exception as exc:            # the user's host code
                    self._stop(host_error(_code(exc)), exc)
                if rt is self.graphed:
                    fed = named
                if rt is self.eager and not eager:
                    continue
                try:
                    out.append(wrap(rt, program) if rt is self.graphed else program.forward())
                except IllegalAddress as exc:
                    self._stop(ILLEGAL_ADDRESS if self.graphs else warmup_error(exc.code), exc)
                except Exception as exc:
                    self._stop(failed(exc) if rt is self.graphed else host_error(_code(exc)), exc)
                if eager and program.after is not None:
                    try:
                        out[-1] = program.after(k, out[-1]) or out[-1]
                    except IllegalAddress as exc:
                        self._stop(ILLEGAL_ADDRESS, exc)
                    except Exception as exc:            # the user's host code
                        self._stop(host_error(_code(exc)), exc)
        return out, fed

    def _warm_up_once(self, name: str) -> None:
        def warm(rt: Runtime, program: Program) -> TensorHandle:
            with rt.call("warmup"):
                return program.forward()
        self._both(name, warm, lambda exc: warmup_error(_code(exc)))

    def _capture_once(self, name: str, pool_of: str | None) -> None:
        if name in self.graphs:
            raise ValueError(f"{name!r} is captured already; replay it, or build another program")
        if pool_of is not None and pool_of not in self.graphs:
            raise ValueError(f"pool_of={pool_of!r}: capture that graph first (captured: {sorted(self.graphs)})")
        pool = self.graphs[pool_of].pool() if pool_of is not None else None

        def capture(rt: Runtime, program: Program) -> TensorHandle:
            with rt.call("capture"):
                with rt.graph(program.stream, label=name, inputs=program.inputs, pool=pool,
                              capture_error_mode=program.capture_error_mode, generators=program.generators) as g:
                    out = program.forward()
            self.graphs[name] = g
            return program.after_capture(out) if program.after_capture else out
        # The capture's call runs nothing on the device, so the eager runtime only feeds it: the
        # device state a replay starts from is what the warm-ups left, in both.
        self._outputs[name] = self._both(name, capture, lambda exc: capture_error(_code(first_error(exc))),
                                         eager=False)[0][0]

    def _replay_once(self, name: str, copy_out: bool) -> Callable[[], Replayed | None]:
        if name not in self.graphs:
            raise ValueError(f"capture {name!r} before replaying it")
        graph, out = self.graphs[name], self._outputs[name]

        def replay(rt: Runtime, program: Program) -> TensorHandle:
            graph.replay()
            return rt.clone(out, label=f"{out.label}.copy") if copy_out else out
        (source, eager_out), fed = self._both(name, replay, lambda exc: host_error(_code(exc)))
        k, want = self.calls, self.eager.read(eager_out)
        stream = self._programs[self.graphed][name].stream

        def read() -> Replayed:
            try:
                with _on(self.graphed, stream):
                    got = self.graphed.read(self.graphed.clone(source, label=f"read {source.label}"))
            except IllegalAddress as exc:
                self._stop(ILLEGAL_ADDRESS, exc)
            done = Replayed(name, k, got, want, fed)
            self._result.replays.append(done)
            if not done.ok:
                self._result.outcome = SILENT_WRONG
            return done
        return read


def _on(rt: Runtime, stream: Stream | None) -> AbstractContextManager[object]:
    """``with torch.cuda.stream(stream)``, or nothing where the program names none."""
    return rt.stream(stream) if stream is not None else nullcontext()


def _programs(built: "Program | Mapping[str, Program]") -> dict[str, Program]:
    if isinstance(built, Program):
        return {ONE: built}
    if isinstance(built, Mapping) and built and all(isinstance(p, Program) for p in built.values()):
        return dict(built)
    raise TypeError(f"build(rt) must return a Program or a mapping of names to Programs, got {built!r}")


def _code(exc: BaseException) -> str:
    """An error's name in an outcome: a simulated error's code, else the exception's type."""
    return exc.code if isinstance(exc, SimulatedError) else type(exc).__name__


def run_program(build: Build, *, warmups: int = 2, replays: int = 3, profile: Profile | None = None) -> ProgramResult:
    """Warm up ``warmups`` calls, capture one, replay ``replays`` with fresh inputs, compare with eager."""
    return _run(Session(build, profile), warmups, replays)


def explore_program(build: Build, *, warmups: int = 2, replays: int = 3,
                    profile: Profile | None = None) -> Exploration:
    """Every outcome ``run_program(build, ...)`` can have: as timed, and with each race of its graph run
    either way, each with a witness (``simlib.engine.schedules.explore``). One outcome: no race decides."""
    return explore(lambda rt: _run(Session(build, runtime=rt), warmups, replays).outcome, profile)


def _run(session: Session, warmups: int, replays: int) -> ProgramResult:
    if warmups < 0 or replays < 1:
        raise ValueError(f"warmups={warmups} must be >= 0 and replays={replays} >= 1")
    session.warm_up(calls=warmups)
    session.capture()
    for _ in range(replays):
        session.replay()
    return session.result()
