"""The checker on traces written the way a recorder of plain PyTorch writes them.

Each test is a short story: a hand-built trace with real streams (``main`` and
``alt``), fork and join through ``EventOp`` record/wait (deps on the launches
an event covers), the caching allocator's ``Alloc``/``Free`` (a graph's pool
is ``graph<N>`` and hands a freed block out again), raw-kernel extents with
``Arg.storage_nbytes``, and ``HostRead`` records for ``x.shape``. Every rule
is asserted on the buggy story and its absence on the safe twin.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from simlib.checker import ERROR, WARNING, Finding, check, format_report
from simlib.glossary import GRAPH_HOLDS, NO_NODE, NULL_POINTER_NODE
from simlib.trace import (
    Alloc,
    Arg,
    Capture,
    EventOp,
    Free,
    HostRead,
    Launch,
    Mutation,
    Record,
    Replay,
    SkippedLaunch,
    Trace,
    View,
)

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


# --------------------------------------------------------------------------- rule 1: host reads, views
def guarded_shared_expert(rec: Recorder, x: T, out: T, stream="alt") -> None:
    """``if x.shape[0] == 0: return`` then the expert into the static ``out`` (real code's guard)."""
    if rec.shape_of(x, stream)[0] == 0:
        return
    rec.launch("shared_expert", reads=[x], writes=[out], stream=stream)


@pytest.mark.parametrize("dispose_first", [True, False])
def test_a_shape_guard_after_the_dispose_is_rule_1_even_though_no_kernel_follows(dispose_first):
    rec = Recorder()
    out = rec.empty("shared_out")
    rec.begin()
    x = rec.empty("x")
    rec.launch("norm", writes=[x])
    rec.wait_stream("alt", "main")
    if dispose_first:
        rec.dispose(x)
    guarded_shared_expert(rec, x, out)
    if not dispose_first:
        rec.dispose(x)
    rec.wait_stream("main", "alt")
    rec.end()
    findings = [f for f in rec.check() if f.rule == 1]
    if not dispose_first:
        assert findings == []                      # the guard saw the full shape, the expert ran
        return
    [mutation] = findings
    assert mutation.label == "x" and mutation.pointers[1] == 0
    assert "the host's read of 'x'.shape" in mutation.why
    assert "branching on the emptied shape (0,)" in mutation.why


def test_a_host_read_of_an_unchanged_shape_is_not_a_use():
    """``untyped_storage().resize_(0)`` keeps the shape: a shape read after it sees nothing new."""
    rec = Recorder()
    rec.begin()
    x = rec.empty("x")
    rec.launch("norm", writes=[x])
    rec._emit(Mutation, op="resize_", tensor=x.id, label="x", old_ptr=x.ptr, old_numel=x.numel,
              old_shape=x.shape, new_ptr=0, new_numel=x.numel, new_shape=x.shape, graph=0)
    rec.shape_of(x)
    rec.end()
    assert rec.check() == []


def test_a_view_taken_after_the_dispose_is_a_use_even_if_nothing_launches_with_it():
    for view_first in (False, True):
        rec = Recorder()
        rec.begin()
        x = rec.empty("x")
        rec.launch("norm", writes=[x])
        if view_first:
            rec.view(x, "x_rows", (ROWS, HIDDEN))
        rec.dispose(x)
        if not view_first:
            rec.view(x, "x_rows", (0, HIDDEN))
        rec.end()
        findings = rec.check()
        if view_first:
            assert findings == []                 # the view kept the old storage
        else:
            assert rules(findings) == [(1, "host_mutation", ERROR)]
            assert "for the view 'x_rows' taken at step" in findings[0].why
            assert "carries 0x0 (0 elements)" in findings[0].why


# --------------------------------------------------------------------------- rules 1 and 2: what the graph holds
def test_each_consumer_is_told_what_the_graph_holds_for_it():
    """A raw kernel got a null pointer (a node that faults); a torch op over the emptied view
    launched nothing (no node): the messages say so, and never that nothing 'froze' a value."""
    rec = Recorder()
    rec.begin()
    x = rec.empty("x")
    rec.launch("norm", writes=[x])
    rec.wait_stream("alt", "main")
    rec.dispose(x)
    rec.launch("raw_gate_up", reads=[rec.arg(x, "r", numel=ROWS * HIDDEN)],
               writes=[rec.empty("up", stream="alt")], stream="alt", kernel="shared_gate_up_triton")
    rows = rec.view(x, "x_rows", (0, HIDDEN))
    rec.launch("shared.down", reads=[rows], writes=[rec.view(rec.empty("s", stream="alt"), "s_rows", (0, HIDDEN))],
               stream="alt")
    rec.wait_stream("main", "alt")
    rec.end()
    findings = rec.check()
    assert rules(findings) == [(1, "host_mutation", ERROR), (2, "empty_argument", ERROR)]
    for f in findings:
        assert "'raw_gate_up' on alt at step" in f.why
        assert f"the graph holds {GRAPH_HOLDS[NULL_POINTER_NODE]}" in f.why
        assert "'shared.down' on alt at step" in f.why and f"the graph holds {GRAPH_HOLDS[NO_NODE]}" in f.why
        assert "froze the new value" not in f.why and "every replay runs" not in f.why


# --------------------------------------------------------------------------- rule 6
@pytest.mark.parametrize("access, words", [("r", "reads 32 bytes past its end"),
                                           ("w", "writes 32 bytes past its end, over whatever")])
def test_a_kernel_sized_past_its_storage_is_rule_6(access, words):
    for declared in (ROWS * HIDDEN + 16, ROWS * HIDDEN):            # 16 elements too many, or exact
        rec = Recorder()
        rec.begin()
        buf = rec.empty("buf")
        other = rec.empty("other")
        rec.launch("fill", writes=[buf])
        rec.launch("raw_kernel", reads=[rec.arg(buf, access, numel=declared)] if access == "r" else [other],
                   writes=[rec.arg(buf, access, numel=declared)] if access == "w" else [other])
        rec.end()
        findings = rec.check()
        if declared == ROWS * HIDDEN:
            assert findings == []
            continue
        assert rules(findings) == [(6, "extent_exceeds_storage", ERROR)]
        assert findings[0].label == "buf" and findings[0].pointers == (buf.ptr,)
        assert f"extent of {declared * ITEM} bytes" in findings[0].why
        assert f"only {NBYTES} bytes of storage" in findings[0].why and words in findings[0].why


def test_an_unknown_storage_size_is_not_guessed_but_a_null_pointer_has_none():
    rec = Recorder()
    x = rec.empty("x")
    rec.dispose(x)                                   # emptied before the capture: not rule 1 or 2
    rec.begin()
    unknown = Arg("in", 99, "mystery", 0x7E00_0000_1000, 999, (999,), 999 * ITEM, "r", storage_nbytes=None)
    rec.launch("raw_kernel", reads=[unknown, rec.arg(x, "r", numel=ROWS * HIDDEN)],
               writes=[rec.empty("out")])
    rec.end()
    [finding] = rec.check()
    assert (finding.rule, finding.label, finding.pointers) == (6, "x", (0,))
    assert GRAPH_HOLDS[NULL_POINTER_NODE] in finding.why and "cudaErrorIllegalAddress" in finding.why


# --------------------------------------------------------------------------- rule 7
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


@pytest.mark.parametrize("guard", [True, False], ids=["shape_guard", "zero_rows"])
def test_a_static_buffer_the_capture_stopped_writing_keeps_the_warm_ups_answer(guard):
    findings = warm_up_and_capture(dispose=True, guard=guard).check()
    frozen = [f for f in findings if f.rule == 7]
    assert [(f.code, f.severity, f.label) for f in frozen] == [("frozen_state", ERROR, "shared_out")]
    why = frozen[0].why
    assert "'shared_expert' on main wrote it eagerly at step" in why and "static input 'hidden'" in why
    assert "set_ of 'x' at step" in why and "before the graph's first read" in why
    if guard:                                         # the host read that skipped the writer
        assert "host code read 'x'.shape at step" in why and "emptied shape (0,)" in why
    else:                                             # the recorder saw the op that launched nothing
        assert "'shared_expert' on main at step" in why and GRAPH_HOLDS[NO_NODE] in why


def test_without_evidence_the_frozen_buffer_names_the_dispose_as_a_likely_cause():
    [frozen] = [f for f in warm_up_and_capture(dispose=True, guard=True, seen=False).check() if f.rule == 7]
    assert "The capture emptied 'x' (set_ at step" in frozen.why and "if the op that writes" in frozen.why


def test_the_safe_twins_of_the_frozen_buffer_are_clean():
    assert warm_up_and_capture(dispose=False, guard=True).check() == []    # the graph writes it
    refreshed = warm_up_and_capture(dispose=True, guard=True, refresh_eagerly=True).check()
    assert [f for f in refreshed if f.rule == 7] == []                     # rewritten before replays


def test_a_constant_cache_built_in_warm_up_is_not_frozen_state():
    """Rotary-style cache: computed once in the first forward (the warm-up) from constants and
    from a template's shape only, then read by every replay. Nothing input-derived: no finding."""
    rec = Recorder()
    hidden = rec.empty("hidden")
    rec.launch("copy_", writes=[hidden])
    cos = rec.empty("cos_cache")
    mask = rec.empty("mask")
    for captured in (False, True):
        if captured:
            rec.begin(inputs=(hidden,))
        else:
            rec.launch("arange_cos", writes=[cos], kernel="aten.cos.out")           # from constants
            rec.launch("ones_like", reads=[hidden], writes=[mask], kernel="aten.ones_like.default")
        y = rec.empty("y")
        rec.launch("rotary", reads=[hidden, cos, mask], writes=[y])
    rec.end()
    rec.launch("copy_", writes=[hidden])
    rec.replay(0)
    assert rec.check() == []


def test_data_derived_from_the_input_but_freed_before_the_capture_is_not_frozen():
    rec = Recorder()
    hidden = rec.empty("hidden")
    tmp = rec.empty("tmp")
    rec.launch("scale", reads=[hidden], writes=[tmp])
    rec._emit(Free, label="tmp", ptr=tmp.ptr, nbytes=0, stream="main", pool="default", graph=None)
    table = rec.empty("table", ptr=tmp.ptr)           # the block again, holding a new tensor
    rec.begin(inputs=(hidden,))
    rec.launch("lookup", reads=[hidden, table], writes=[rec.empty("y")])
    rec.end()
    assert rec.check() == []


# --------------------------------------------------------------------------- rule 4 with the real allocator
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


def test_the_reorder_fix_reuses_the_disposed_block_while_alt_may_read_it():
    rec, x = reorder_fix(dispose_after_join=False)
    findings = rec.check()
    assert rules(findings) == [(4, "reuse_after_free", WARNING)]
    free = next(r for r in rec.records if type(r) is Free)
    assert findings[0].step == free.step and findings[0].label == "x"
    assert f"({NBYTES} bytes at" in findings[0].why           # the size came from the Alloc
    assert "'shared_expert' on stream alt" in findings[0].why and "'routed_experts'" in findings[0].why


def test_disposing_after_the_join_orders_the_reuse():
    assert reorder_fix(dispose_after_join=True)[0].check() == []


def test_frees_and_reallocations_on_one_stream_in_order_are_not_races():
    rec = Recorder()
    rec.begin()
    a = rec.empty("a")
    rec.launch("k1", writes=[a])
    rec.launch("k2", reads=[a], writes=[rec.empty("b")])
    rec._emit(Free, label="a", ptr=a.ptr, nbytes=0, stream="main", pool="graph0", graph=0)
    c = rec.empty("c", ptr=a.ptr)
    rec.launch("k3", writes=[c])
    rec.wait_stream("alt", "main")                    # alt forks after the reuse: ordered too
    rec.launch("k4", reads=[c], writes=[rec.empty("d", stream="alt")], stream="alt")
    rec.wait_stream("main", "alt")
    rec.end()
    assert rec.check() == []


# --------------------------------------------------------------------------- rule 0
def test_a_failed_capture_is_reported_first_and_alone():
    rec = Recorder()
    buf = rec.empty("buf")
    rec.begin()
    rec.wait_stream("alt", "main")
    rec.launch("writer", writes=[buf], stream="alt")
    rec.launch("reader", reads=[buf], writes=[rec.empty("out")])       # unordered: a race ...
    rec.end(error="CUDA error: operation not permitted when stream is capturing "
                  "(cudaErrorStreamCaptureInvalidated)")               # ... in a graph that never was
    findings = rec.check()
    assert rules(findings) == [(0, "capture_failed", ERROR)]
    why = findings[0].why
    assert "cudaErrorStreamCaptureInvalidated" in why and "There is no graph" in why
    assert "invalidated it" in why                                      # what the error means
    assert format_report(findings).startswith("ERROR rule 0 (capture_failed)")


def test_a_failed_capture_comes_before_findings_at_earlier_steps():
    rec = Recorder()
    rec.begin()
    x = rec.empty("x")
    rec.launch("norm", writes=[x])
    rec.dispose(x)
    rec.launch("use", reads=[x], writes=[rec.empty("y")])
    rec.end()                                          # graph 0: rules 1 and 2
    rec.begin(graph=1)
    rec.end(error="cudaErrorStreamCaptureUnjoined")
    findings = rec.check()
    assert [f.rule for f in findings] == [0, 1, 2]
    assert findings[0].step > findings[1].step and "main.wait_stream(alt)" in findings[0].fix


def test_an_unknown_capture_error_gets_the_glossarys_meaning():
    rec = Recorder()
    rec.begin()
    rec.end(error="RuntimeError: something odd")
    [failed] = rec.check()
    assert "'RuntimeError: something odd'" in failed.why
    assert "the capture itself failed, so there is no graph to replay" in failed.why


@pytest.mark.parametrize("story", [
    lambda: warm_up_and_capture(dispose=True, guard=True),
    lambda: reorder_fix(dispose_after_join=False)[0],
])
def test_story_traces_round_trip_through_json_with_identical_findings(story):
    trace = Trace(records=story().records)
    findings = check(trace)
    assert findings and check(Trace.from_json(trace.to_json())) == findings
