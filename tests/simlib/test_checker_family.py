"""Rules 8-11 (the incident family) on hand-built traces: each hazard, and the programs it must not flag."""

from __future__ import annotations

from dataclasses import dataclass, field

from simlib.checker import ERROR, check, format_report
from simlib.memory import graph_pool
from simlib.trace import Alloc, Arg, Call, Capture, Free, Launch, Record, Replay, Trace

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

    def capture(self, gid: int, body, pool: str = "") -> None:
        self.add(Capture(self._step(), 0.0, "begin", gid, "capture", pool=pool))
        self.graph = gid
        body()
        self.graph = None
        self.add(Capture(self._step(), 0.0, "end", gid, "capture"))

    def alloc(self, tensor: int, ptr: int, nbytes: int = 64, pool: str = "default", label: str | None = None) -> None:
        self.add(Alloc(self._step(), 0.0, tensor, label or f"t{tensor}", ptr, nbytes, "capture", pool))

    def free(self, ptr: int, nbytes: int = 64, pool: str = "default", label: str = "ws") -> None:
        self.add(Free(self._step(), 0.0, label, ptr, nbytes, "capture", pool, self.graph))

    def replay(self, gid: int, index: int) -> None:
        self.add(Replay(self._step(), 0.0, gid, index, "main"))

    def check(self):
        return check(Trace(list(self.records)))


def codes(findings) -> list[int]:
    return [f.rule for f in findings]


# --------------------------------------------------------------------------- rule 8
def scaled(t: Tracer, *values: str, capture: str, layers: int = 1) -> None:
    """Warm-up calls with ``values`` of the scale, then the capture's call with ``capture``."""
    def body(value: str) -> None:
        for layer in range(layers):
            own = value if layers == 1 else f"{value}/{layer}"
            t.launch("mul", arg(1, W), arg(2, W + 512, "w"), scalars=[("scale", own)])
    for v in values:
        t.call("warmup", lambda v=v: body(v))
    t.call("capture", lambda: t.capture(0, lambda: body(capture)))


def test_a_scalar_that_changes_per_call_is_frozen_by_the_graph():
    t = Tracer()
    scaled(t, "0.5", "0.75", capture="1.0")
    findings = t.check()
    assert codes(findings) == [8]
    f = findings[0]
    assert f.severity == ERROR and f.code == "frozen_host_value"
    assert "scale=1.0" in f.why and "0.5, 0.75" in f.why and "model.py:10" in f.why and "on main" in f.why
    assert f.step == next(r.step for r in t.records if isinstance(r, Launch) and r.graph == 0)
    assert "device tensor" in f.fix


def test_a_scalar_constant_across_calls_is_fine():
    t = Tracer()
    scaled(t, "0.5", "0.5", capture="0.5")
    assert t.check() == []


def test_per_layer_constants_are_fine_and_per_layer_changes_are_not():
    t = Tracer()
    scaled(t, "c", "c", capture="c", layers=3)       # layer k always gets c/k: n tells layers apart
    assert t.check() == []
    t = Tracer()
    scaled(t, "a", "b", capture="c", layers=3)
    findings = t.check()
    assert codes(findings) == [8] and "2 more launches" in findings[0].why


def test_calls_that_read_other_shapes_belong_to_other_graphs():
    t = Tracer()
    t.call("warmup", lambda: t.launch("mul", arg(1, W, nbytes=128, shape=(64,)), scalars=[("n", "64")]))
    t.call("capture", lambda: t.capture(0, lambda: t.launch("mul", arg(1, W), scalars=[("n", "32")])))
    assert t.check() == []


def test_without_call_records_nothing_is_compared():
    t = Tracer()
    t.launch("mul", arg(1, W), scalars=[("scale", "0.5")])
    t.capture(0, lambda: t.launch("mul", arg(1, W), scalars=[("scale", "1.0")]))
    assert t.check() == []


# --------------------------------------------------------------------------- rule 9
def positions_call(t: Tracer, tensor: int, ptr: int, *, copy_role: str = "h2d") -> None:
    t.launch("copy_h2d", arg(tensor, ptr, "w", label="positions"), role=copy_role, site="model.py:5")
    t.launch("rope", arg(tensor, ptr, label="positions"), arg(9, W + 4096, "w"))


def test_an_input_rebuilt_from_the_host_every_call_is_flagged():
    t = Tracer()
    for k in range(2):
        t.call("warmup", lambda k=k: positions_call(t, 10 + k, W))     # same address, a fresh tensor
    t.call("capture", lambda: t.capture(0, lambda: positions_call(t, 20, P)))
    findings = t.check()
    assert codes(findings) == [9]
    f = findings[0]
    assert f.label == "positions" and f.code == "input_rebuilt"
    assert "2 earlier calls" in f.why and "re-reads the host buffer" in f.why
    assert "static.copy_" in f.fix


def test_a_static_buffer_refreshed_each_call_is_fine():
    t = Tracer()
    for _ in range(2):
        t.call("warmup", lambda: positions_call(t, 10, W))              # one tensor, every call
    t.call("capture", lambda: t.capture(0, lambda: positions_call(t, 10, W)))
    assert t.check() == []


def test_one_earlier_call_is_not_enough_to_say_every_call():
    t = Tracer()
    t.call("warmup", lambda: positions_call(t, 10, W))
    t.call("capture", lambda: t.capture(0, lambda: positions_call(t, 20, P)))
    assert t.check() == []


def test_fresh_tensors_not_copied_from_the_host_are_not_rebuilt_inputs():
    t = Tracer()
    for k in range(2):
        t.call("warmup", lambda k=k: positions_call(t, 10 + k, W, copy_role="copy"))
    t.call("capture", lambda: t.capture(0, lambda: positions_call(t, 20, P, copy_role="copy")))
    assert t.check() == []


# --------------------------------------------------------------------------- rule 10
def workspace_graph(t: Tracer, *, free_during: bool = False, pool: str = "default", ptr: int = W) -> None:
    t.alloc(5, ptr, pool=pool, label="ws")
    def body() -> None:
        t.launch("gemm", arg(1, W + 1024), arg(5, ptr, "w", label="ws"))
        if free_during:
            t.free(ptr, pool=pool)
    t.capture(0, body)


def test_a_workspace_freed_during_capture_is_freed_under_the_graph():
    t = Tracer()
    workspace_graph(t, free_during=True)
    t.alloc(6, W, label="someone_else")
    t.replay(0, 0)
    findings = t.check()
    assert codes(findings) == [10]
    f = findings[0]
    assert f.code == "freed_under_graph" and f.label == "ws" and f.pointers == (W,)
    assert "while graph 0 was being captured" in f.why and "'someone_else'" in f.why
    assert "graph 0 replayed after it (replay #0" in f.why and "Keep 'ws' alive" in f.fix


def test_a_free_after_capture_counts_only_when_a_replay_follows():
    t = Tracer()
    workspace_graph(t)
    t.replay(0, 0)
    t.free(W)
    assert t.check() == []                           # freed after the last replay
    t.replay(0, 1)
    findings = t.check()
    assert codes(findings) == [10] and "after graph 0 was captured" in findings[0].why


def test_blocks_of_the_graphs_own_pool_are_not_freed_under_it():
    t = Tracer()
    t.add(Capture(0, 0.0, "begin", 0, "capture"))
    t.graph = 0
    t.alloc(5, P, pool=graph_pool(0))
    t.launch("gemm", arg(5, P, "w"))
    t.free(P, pool=graph_pool(0))
    t.graph = None
    t.add(Capture(t._step(), 0.0, "end", 0, "capture"))
    t.replay(0, 0)
    assert 10 not in codes(t.check())


def test_a_block_of_another_graphs_capture_is_graph_memory_whatever_its_pool_is_called():
    t = Tracer()
    t.capture(0, lambda: (t.alloc(5, P, pool="tree_pool"), t.launch("f", arg(5, P, "w"))))
    t.capture(1, lambda: t.launch("g", arg(5, P)))          # a recorder that did not say the pool is shared
    t.free(P, pool="tree_pool")
    t.replay(1, 0)
    assert 10 not in codes(t.check())


def test_pointer_zero_is_not_skipped():
    t = Tracer()
    workspace_graph(t, free_during=True, ptr=0)
    t.replay(0, 0)
    assert codes(t.check()) == [6, 10]               # rule 6: nothing lies behind pointer 0 either


# --------------------------------------------------------------------------- rule 11
def two_graphs(t: Tracer, *, shared: bool) -> None:
    """Graph 0 writes its output at P; graph 1 (in graph 0's pool, or its own) writes scratch there."""
    other = P if shared else P + 0x1_0000_0000
    def g0() -> None:
        t.alloc(1, P, pool=graph_pool(0), label="out1")
        t.launch("mlp", arg(0, W), arg(1, P, "w", label="out1"))
    def g1() -> None:
        t.alloc(2, other, nbytes=128, pool=graph_pool(0) if shared else graph_pool(1), label="scratch2")
        t.launch("mlp2", arg(0, W), arg(2, other, "w", nbytes=128, label="scratch2"))
    t.capture(0, g0)
    t.capture(1, g1, pool=graph_pool(0) if shared else "")


def read_out1(t: Tracer) -> None:
    t.launch("sample", arg(1, P, label="out1"), arg(7, W + 8192, "w"))


def test_reading_a_graphs_output_after_another_graph_replayed_into_its_pool():
    t = Tracer()
    two_graphs(t, shared=True)
    t.replay(0, 0)
    t.replay(1, 0)
    read_out1(t)
    findings = t.check()
    assert codes(findings) == [11]
    f = findings[0]
    assert f.code == "graphs_clobber" and f.label == "out1"
    assert "Graph 0's node 'mlp'" in f.why and "graph 1's node 'mlp2'" in f.why and "'sample'" in f.why
    assert f.step == next(r.step for r in t.records if isinstance(r, Replay) and r.graph == 1)
    assert "before replaying graph 1" in f.fix


def test_reading_the_output_before_replaying_the_other_graph_is_fine():
    t = Tracer()
    two_graphs(t, shared=True)
    t.replay(0, 0)
    read_out1(t)
    t.replay(1, 0)
    t.replay(0, 1)
    read_out1(t)
    assert t.check() == []


def test_two_graphs_in_separate_pools_do_not_clobber():
    t = Tracer()
    two_graphs(t, shared=False)
    t.replay(0, 0)
    t.replay(1, 0)
    read_out1(t)
    assert t.check() == []


def test_reading_the_other_graphs_own_output_where_the_first_was_is_fine():
    t = Tracer()
    two_graphs(t, shared=True)
    t.replay(0, 0)
    t.replay(1, 0)
    t.launch("sample", arg(2, P, nbytes=128, label="scratch2"))      # graph 1's result, read as such
    assert t.check() == []


def test_a_graph_reading_back_its_clobbered_state():
    t = Tracer()
    t.capture(0, lambda: (t.alloc(3, P, pool=graph_pool(0), label="cache"),
                          t.launch("cache_update", arg(3, P, "rw", label="cache"))))
    t.capture(1, lambda: (t.alloc(4, P, nbytes=128, pool=graph_pool(0), label="tmp"),
                          t.launch("other", arg(4, P, "w", nbytes=128, label="tmp"))), pool=graph_pool(0))
    t.replay(0, 0)
    t.replay(1, 0)
    t.replay(0, 1)
    findings = t.check()
    assert codes(findings) == [11] and "reading its own state back" in findings[0].why
    assert "rule 11 (graphs_clobber)" in format_report(findings)


def test_an_update_in_place_by_the_other_graph_is_not_a_clobber():
    t = Tracer()
    t.capture(0, lambda: (t.alloc(3, P, pool=graph_pool(0), label="cache"),
                          t.launch("append", arg(3, P, "rw", label="cache"))))
    t.capture(1, lambda: t.launch("append2", arg(3, P, label="cache"), arg(3, P, "w", label="cache")))
    for order in ((0, 1, 0), (1, 0, 1)):
        for i, gid in enumerate(order):
            t.replay(gid, i)
    assert t.check() == []


def bucket_graphs(t: Tracer) -> None:
    """Two batch-size graphs in one pool, captured largest first, as serving engines do. Graph 0's
    intermediate ``h0`` lives at P and is freed inside its capture; its output ``out0`` lives at Q.
    Graph 1 gets P from the pool: its intermediate ``h1`` overwrites it, then its output ``out1``
    is laid exactly where ``h0`` was."""
    q = P + 0x10_0000
    def g0() -> None:
        t.alloc(10, P, nbytes=256, pool=graph_pool(0), label="h0")
        t.launch("mm", arg(0, W), arg(10, P, "w", nbytes=256, label="h0"))
        t.alloc(11, q, pool=graph_pool(0), label="out0")
        t.launch("down", arg(10, P, nbytes=256, label="h0"), arg(11, q, "w", label="out0"))
        t.free(P, nbytes=256, pool=graph_pool(0), label="h0")
    def g1() -> None:
        t.alloc(20, P, nbytes=512, pool=graph_pool(0), label="h1")
        t.launch("_softmax", arg(0, W), arg(20, P, "w", nbytes=512, label="h1"))
        t.free(P, nbytes=512, pool=graph_pool(0), label="h1")
        t.alloc(21, P, nbytes=256, pool=graph_pool(0), label="out1")
        t.launch("down", arg(0, W), arg(21, P, "w", nbytes=256, label="out1"))
    t.capture(0, g0)
    t.capture(1, g1, pool=graph_pool(0))


def test_a_graphs_intermediates_are_dead_after_its_replay_so_the_next_bucket_reusing_them_clobbers_nothing():
    # The vLLM/SGLang runner: each output copied out right after its replay, the next bucket's
    # graph reusing the first one's intermediates. Reading graph 1's output, laid where graph 0's
    # dead intermediate was, reads graph 1's result (issue 34's false alarm).
    t = Tracer()
    bucket_graphs(t)
    for step in range(3):
        t.replay(step % 2, step // 2)
        gid = step % 2
        t.launch("clone", arg(11 if gid == 0 else 21, P + 0x10_0000 if gid == 0 else P,
                              nbytes=64 if gid == 0 else 256, label=f"out{gid}"))
    assert t.check() == []


def test_a_live_output_read_through_a_weak_reference_after_the_next_bucket_replayed_is_a_clobber():
    # The same runner reading graph 0's output after graph 1 replayed (vLLM #42177): its output is
    # live (its capture left it allocated), read through a new tensor on its exact span.
    t = Tracer()
    q = P + 0x10_0000
    t.capture(0, lambda: (t.alloc(11, q, pool=graph_pool(0), label="out0"),
                          t.launch("down", arg(0, W), arg(11, q, "w", label="out0"))))
    t.free(q, pool=graph_pool(0), label="out0")          # only a weak reference kept: the pool may reuse it
    t.capture(1, lambda: (t.alloc(21, q, nbytes=32, pool=graph_pool(0), label="out1"),
                          t.launch("down", arg(0, W), arg(21, q, "w", nbytes=32, label="out1"))), pool=graph_pool(0))
    t.replay(0, 0)
    t.replay(1, 0)
    t.launch("clone", arg(30, q, label="weak_out0"))
    (finding,) = t.check()
    assert finding.code == "graphs_clobber" and "'weak_out0'" in finding.why and "'out1'" in finding.why
    assert f"[{hex(q)}, +64 bytes)" in finding.why and f"[{hex(q)}, +32 bytes)" in finding.why


def test_a_static_input_rebound_every_step_is_one_finding_for_the_graphs_argument():
    # serve_static_input_rebuilt: the bucket's input rebuilt each step; the allocator cuts the freed
    # block into new tensors, which are freed in turn. Each free lands under the same captured argument.
    t = Tracer()
    t.alloc(5, W, nbytes=1024, label="static")
    t.capture(0, lambda: t.launch("add", arg(5, W, nbytes=1024, label="static"), arg(6, P, "w")))
    for step in range(4):
        t.free(W + 256 * step if step else W, nbytes=256 if step else 1024, label=f"static{step}")
        t.alloc(10 + step, W + 256 * (step + 1), nbytes=256, label=f"new{step}")
        t.replay(0, step)
    (finding,) = t.check()
    assert finding.code == "freed_under_graph" and finding.label == "static0"
