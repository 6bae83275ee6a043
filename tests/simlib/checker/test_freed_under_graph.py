"""Rule 10, ``freed_under_graph``: a block a graph uses, outside its pool, freed while the graph lives.

The property test runs it against the simulator: a table built before the capture and read by the
graph, freed during the capture, after it, or never, while other tensors come and go. Whenever a
replay computed something other than eager, the checker reports ``freed_under_graph``; a table kept
alive is never reported."""

from __future__ import annotations

from checker_stories import P, Tracer, W, arg, numbers
from hypothesis import event, given, settings
from hypothesis import strategies as st

from simlib.memory import graph_pool
from simlib.programs.gallery.case import refreshed
from simlib.programs.harness import Program, Session
from simlib.trace import Capture


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
    assert numbers(findings) == [10]
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
    assert numbers(findings) == [10] and "after graph 0 was captured" in findings[0].why


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
    assert 10 not in numbers(t.check())


def test_a_block_of_another_graphs_capture_is_graph_memory_whatever_its_pool_is_called():
    t = Tracer()
    t.capture(0, lambda: (t.alloc(5, P, pool="tree_pool"), t.launch("f", arg(5, P, "w"))))
    t.capture(1, lambda: t.launch("g", arg(5, P)))          # a recorder that did not say the pool is shared
    t.free(P, pool="tree_pool")
    t.replay(1, 0)
    assert 10 not in numbers(t.check())


def test_pointer_zero_is_not_skipped():
    t = Tracer()
    workspace_graph(t, free_during=True, ptr=0)
    t.replay(0, 0)
    assert numbers(t.check()) == [6, 10]               # rule 6: nothing lies behind pointer 0 either


H = 64


def table_program(free_in_capture: bool, free_after: int | None, churn: list[int]):
    def build(rt):
        x = rt.empty((4, H), "x")
        plugin = {"table": None, "calls": 0}

        def feed(k):
            plugin["calls"] += 1
            if plugin["calls"] == free_after and plugin["table"] is not None:
                rt.release(plugin["table"])            # replaced after the capture; the graph reads the old one
                plugin["table"] = None
            for rows in churn[:k % 3]:                 # other tensors come and go
                rt.release(rt.from_host((rows, H), "other", value=f"other{k}"))
            refreshed(rt, x, "x", k)

        def forward():
            if plugin["table"] is None:
                plugin["table"] = rt.empty((4, H), "table")
                rt.launch("build_table", writes=[plugin["table"]])
            out = rt.op("gemm", x, plugin["table"], out_shape=(4, H))
            if free_in_capture and rt.is_current_stream_capturing():
                rt.release(plugin["table"])            # "the graph has it now"
                plugin["table"] = None
            return out
        return Program(forward, feed, [x])
    return build


@settings(max_examples=60, deadline=None, derandomize=True)
@given(free_in_capture=st.booleans(), free_after=st.one_of(st.none(), st.integers(4, 7)),
       churn=st.lists(st.integers(1, 8), max_size=3), replays=st.integers(1, 4))
def test_a_wrong_replay_after_a_free_is_always_reported(free_in_capture, free_after, churn, replays):
    session = Session(table_program(free_in_capture, free_after, churn))
    session.warm_up(calls=2)
    session.capture()
    for _ in range(replays):
        session.replay()
    result = session.result()
    reported = "freed_under_graph" in [f.code for f in result.findings()]
    wrong = any(not r.ok for r in result.replays)
    event(f"wrong={wrong} reported={reported}")
    if wrong:
        assert reported, [str(r) for r in result.replays]
    if not free_in_capture and (free_after is None or free_after > 3 + replays):
        assert not reported                    # never freed while the graph replays


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
