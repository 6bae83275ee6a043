"""The traces and programs the checker's tests are told in (tests/simlib/checker).

Three ways to write a trace: a simulated program on a ``Runtime`` (``streams``,
``scenario_findings``); ``Tracer``, one stream, calls, allocations by pointer, views and
rebinds, for the incident family's rules (8 to 11, 13 to 18); and ``Recorder``, writing records the way a
recorder of plain PyTorch does (real streams, fork and join through events, the
caching allocator's blocks, host reads of shapes), with the stories several rules
read (``warm_up_and_capture``, ``reorder_fix``). ``rules``, ``severities`` and
``numbers`` say what a list of findings is, as the tests compare it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from simlib import Runtime
from simlib.checker import Finding, check
from simlib.programs import scenarios
from simlib.programs.spec import MoEConfig
from simlib.trace import (
    Alloc,
    Arg,
    Call,
    Capture,
    EventOp,
    Free,
    HostRead,
    Launch,
    Mutation,
    Rebind,
    Record,
    Replay,
    SkippedLaunch,
    Trace,
    View,
)


def severities(findings: list[Finding]) -> list[tuple[int, str]]:
    return [(f.rule, f.severity) for f in findings]


def scenario_findings(config: MoEConfig) -> list[Finding]:
    return check(scenarios.run(config).trace)


def streams(rt: Runtime):
    return rt.Stream("main"), rt.Stream("alt")


W = 0x7F00_0000_0000          # default pool


P = 0x7E00_0000_0000          # graph 0's pool


def arg(tensor: int, ptr: int, access: str = "r", nbytes: int = 64, label: str | None = None,
        shape: tuple[int, ...] = (32,)) -> Arg:
    return Arg("in0" if "r" in access else "out0", tensor, label or f"t{tensor}", ptr, nbytes // 2, shape,
               nbytes, access, nbytes)


@dataclass
class Tracer:
    """Appends records with consecutive steps; launches get consecutive ids."""

    records: list[Record] = field(default_factory=list)
    graph: int | None = None
    calls: int = 0
    last: tuple[int, ...] = ()        # the previous node of the open capture (one stream: a chain)

    def _step(self) -> int:
        return len(self.records)

    def add(self, record: Record) -> Record:
        self.records.append(record)
        return record

    def launch(self, kernel: str, *args: Arg, scalars=(), site: str = "model.py:10", role: str = "other") -> Launch:
        step = self._step()
        deps, self.last = (self.last, (step,)) if self.graph is not None else ((), ())
        return self.add(Launch(step, float(step), step, kernel, kernel, role, "main", tuple(args), self.graph,
                               deps, scalars=tuple(scalars), site=site))

    def call(self, phase: str, body) -> None:
        index = self.calls
        self.calls += 1
        self.add(Call(self._step(), 0.0, "begin", index, phase))
        body()
        self.add(Call(self._step(), 0.0, "end", index, phase))

    def capture(self, gid: int, body, pool: str = "", generators: tuple[str, ...] = ()) -> None:
        self.add(Capture(self._step(), 0.0, "begin", gid, "capture", pool=pool, generators=generators))
        self.graph = gid
        body()
        self.graph = None
        self.add(Capture(self._step(), 0.0, "end", gid, "capture", generators=generators))

    def view(self, tensor: int, base: int, ptr: int, label: str | None = None, shape: tuple[int, ...] = (32,)) -> None:
        n = 1
        for d in shape:
            n *= d
        self.add(View(self._step(), 0.0, tensor, label or f"t{tensor}", base, ptr, n, shape, self.graph))

    def rebind(self, owner: str, attr: str, old: tuple[int, int], new: tuple[int, int], nbytes: int = 64) -> Rebind:
        """``owner.attr``: ``old`` and ``new`` are (tensor, pointer)."""
        return self.add(Rebind(self._step(), 0.0, owner, attr, old[0], old[1], nbytes, new[0], new[1], nbytes,
                               f"t{old[0]}"))

    def alloc(self, tensor: int, ptr: int, nbytes: int = 64, pool: str = "default", label: str | None = None) -> None:
        self.add(Alloc(self._step(), 0.0, tensor, label or f"t{tensor}", ptr, nbytes, "capture", pool))

    def free(self, ptr: int, nbytes: int = 64, pool: str = "default", label: str = "ws") -> None:
        self.add(Free(self._step(), 0.0, label, ptr, nbytes, "capture", pool, self.graph))

    def replay(self, gid: int, index: int) -> None:
        self.add(Replay(self._step(), 0.0, gid, index, "main"))

    def check(self):
        return check(Trace(list(self.records)))


def numbers(findings) -> list[int]:
    return [f.rule for f in findings]


ROWS, HIDDEN, ITEM = 4, 8, 2


NBYTES = ROWS * HIDDEN * ITEM


@dataclass
class T:
    """A tensor as the host sees it now: id, label, pointer, shape, bytes behind the pointer."""

    id: int
    label: str
    ptr: int
    shape: tuple[int, ...]
    storage: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class Recorder:
    """Writes records like the generic recorder: one step per host event, deps from streams."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.graph: int | None = None
        self._ids = itertools.count(1)
        self._launches = itertools.count()
        self._events = itertools.count(0x5000)
        self._frontier: dict[str, tuple[int, ...]] = {}
        self._covered: dict[int, tuple[int, ...]] = {}
        self._next_ptr = {"default": 0x7F00_0000_0000}

    def _emit(self, cls: type, **fields) -> Record:
        step = len(self.records)
        self.records.append(cls(step=step, t_us=float(step), **fields))
        return self.records[-1]

    @property
    def pool(self) -> str:
        return "default" if self.graph is None else f"graph{self.graph}"

    # memory
    def empty(self, label: str, shape=(ROWS, HIDDEN), stream="main", ptr: int | None = None) -> T:
        nbytes = ITEM * T(0, "", 0, shape, 0).numel
        if ptr is None:
            ptr = self._next_ptr.setdefault(self.pool, 0x7E00_0000_0000 + (self.graph or 0) * 2**32)
            self._next_ptr[self.pool] = ptr + 4096 * ((nbytes + 4095) // 4096)
        t = T(next(self._ids), label, ptr, tuple(shape), nbytes)
        self._emit(Alloc, tensor=t.id, label=label, ptr=ptr, nbytes=nbytes, stream=stream, pool=self.pool)
        return t

    def dispose(self, t: T, stream="main", why="dispose_tensor") -> None:
        """``x.set_(torch.empty(0))``: the tensor becomes empty; its block is freed."""
        old = (t.ptr, t.numel, t.shape)
        self._emit(Mutation, op="set_", tensor=t.id, label=t.label, old_ptr=old[0], old_numel=old[1],
                   old_shape=old[2], new_ptr=0, new_numel=0, new_shape=(0,), graph=self.graph, why=why)
        self._emit(Free, label=t.label, ptr=old[0], nbytes=0, stream=stream, pool=self.pool, graph=self.graph)
        t.ptr, t.shape, t.storage = 0, (0,), 0

    def view(self, base: T, label: str, shape) -> T:
        v = T(next(self._ids), label, base.ptr, tuple(shape), base.storage)
        self._emit(View, tensor=v.id, label=label, base=base.id, ptr=v.ptr, numel=v.numel, shape=v.shape,
                   graph=self.graph)
        return v

    def shape_of(self, t: T, stream="main") -> tuple[int, ...]:
        self._emit(HostRead, op="shape", tensor=t.id, label=t.label, shape=t.shape, stream=stream,
                   graph=self.graph)
        return t.shape

    # launches
    def arg(self, t: T, access: str, numel: int | None = None) -> Arg:
        """A tensor argument, or (``numel``) a raw kernel's pointer with its declared size."""
        n = t.numel if numel is None else numel
        shape = t.shape if numel is None else (numel,)
        return Arg("out" if access == "w" else "in", t.id, t.label, t.ptr, n, shape, n * ITEM, access,
                   storage_nbytes=t.storage)

    def launch(self, label: str, reads=(), writes=(), stream="main", kernel: str | None = None) -> Launch | None:
        args = tuple(a if isinstance(a, Arg) else self.arg(a, "r") for a in reads) + \
            tuple(a if isinstance(a, Arg) else self.arg(a, "w") for a in writes)
        written = [a for a in args if a.writes]
        if written and all(a.numel == 0 for a in written):
            self._emit(SkippedLaunch, kernel=kernel or label, label=label, role="", stream=stream,
                       graph=self.graph, reason="every output has zero elements", args=args)
            return None
        launch_id = next(self._launches)
        deps = self._frontier.get(stream, ()) if self.graph is not None else ()
        if self.graph is not None:
            self._frontier[stream] = (launch_id,)
        return self._emit(Launch, id=launch_id, kernel=kernel or f"aten.{label}.default", label=label,
                          role="", stream=stream, args=args, graph=self.graph, deps=deps)

    # streams: alt.wait_stream(main) is event_record(e, main) + event_wait(e, alt)
    def wait_stream(self, waiter: str, on: str) -> None:
        event = next(self._events)
        covered = self._frontier.get(on, ())
        self._emit(EventOp, op="record", event=event, stream=on, graph=self.graph, deps=covered)
        self._frontier[waiter] = tuple(sorted({*self._frontier.get(waiter, ()), *covered}))
        self._emit(EventOp, op="wait", event=event, stream=waiter, graph=self.graph, deps=covered)

    # capture
    def begin(self, inputs: tuple[T, ...] = (), graph: int = 0) -> None:
        self.graph = graph
        self._frontier = {}
        self._inputs = tuple(t.ptr for t in inputs)
        self._emit(Capture, op="begin", graph=graph, stream="main", inputs=self._inputs)

    def end(self, error: str | None = None) -> None:
        self._emit(Capture, op="end", graph=self.graph, stream="main", inputs=self._inputs, error=error)
        self.graph = None

    def replay(self, index: int) -> None:
        self._emit(Replay, graph=0, index=index, stream="main")

    def check(self) -> list[Finding]:
        return check(Trace(records=list(self.records)))


def rules(findings: list[Finding]) -> list[tuple[int, str, str]]:
    return [(f.rule, f.code, f.severity) for f in findings]


def guarded_shared_expert(rec: Recorder, x: T, out: T, stream="alt") -> None:
    """``if x.shape[0] == 0: return`` then the expert into the static ``out`` (real code's guard)."""
    if rec.shape_of(x, stream)[0] == 0:
        return
    rec.launch("shared_expert", reads=[x], writes=[out], stream=stream)


def warm_up_and_capture(*, dispose: bool, guard: bool, refresh_eagerly: bool = False,
                        seen: bool = True) -> Recorder:
    """Warm-up writes the static ``shared_out`` from the input; the capture disposes ``x`` (or
    not) before the shared expert, guarded by ``x.shape`` (or launched over 0 rows). ``seen``:
    the recorder saw the guard's shape read."""
    rec = Recorder()
    hidden = rec.empty("hidden")                      # the graph's static input
    rec.launch("copy_", writes=[hidden])              # filled from the host
    out = rec.empty("shared_out")
    rec.launch("zero_", writes=[out])
    for captured in (False, True):
        if captured:
            rec.begin(inputs=(hidden,))
        x = rec.empty("x")
        rec.launch("norm", reads=[hidden], writes=[x])
        if captured and dispose:
            rec.dispose(x)
        if guard and seen:
            guarded_shared_expert(rec, x, out, stream="main")
        elif guard:
            if x.shape[0]:
                rec.launch("shared_expert", reads=[x], writes=[out])
        else:
            rows = rec.view(x, "x_rows", x.shape)
            rec.launch("shared_expert", reads=[rows], writes=[rec.view(out, "out_rows", rows.shape)])
        y = rec.empty("y")
        rec.launch("add", reads=[hidden, out], writes=[y])
        if not captured:
            rec._emit(Free, label="x", ptr=x.ptr, nbytes=0, stream="main", pool="default", graph=None)
    rec.end()
    for k in range(2):
        rec.launch("copy_", writes=[hidden])
        if refresh_eagerly:
            rec.launch("shared_expert", reads=[hidden], writes=[out])
        rec.replay(k)
    return rec


def reorder_fix(*, dispose_after_join: bool) -> tuple[Recorder, T]:
    """PR #29463: shared expert first on alt, dispose x, routed experts on main reuse x's block."""
    rec = Recorder()
    hidden = rec.empty("hidden")
    rec.begin(inputs=(hidden,))
    x = rec.empty("x")
    rec.launch("norm", reads=[hidden], writes=[x])
    rec.wait_stream("alt", "main")
    rec.launch("shared_expert", reads=[x], writes=[rec.empty("shared", stream="alt")], stream="alt")
    old = x.ptr
    if dispose_after_join:
        rec.wait_stream("main", "alt")
    rec.dispose(x)
    routed = rec.empty("routed", ptr=old)             # graph0's pool hands x's block out again
    rec.launch("routed_experts", reads=[hidden], writes=[routed])
    rec.wait_stream("main", "alt")
    rec.end()
    return rec, x


def plain_arg(tensor: int, label: str, ptr: int, numel: int, access: str) -> Arg:
    return Arg("in0" if access == "r" else "out0", tensor, label, ptr, numel, (numel,), 2 * numel, access)
