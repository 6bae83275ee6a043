"""Symbolic values and the time model."""

from simlib import Profile, Runtime, Sym, call
from simlib.engine.timing import place
from simlib.engine.values import Const, render
from simlib.trace import DeviceSpan


def test_expressions_compare_by_structure_and_keep_plus_zero_visible():
    a = call("routed", Sym("x2")) + Const(0)
    assert a == call("routed", Sym("x2")) + Const(0)
    assert a != call("routed", Sym("x2")) + call("shared", Sym("x2"))
    assert str(a) == "routed(x2) + 0"


def test_deeply_shared_expressions_compare_and_print_fast():
    h, g = Sym("x"), Sym("x")
    for _ in range(200):   # each level uses the previous one three times: 3**200 tree nodes
        h = h + call("f", h) + call("g", h)
        g = g + call("f", g) + call("g", g)
    assert h == g and h != h + Const(0)
    assert len(render(h, limit=100)) <= 101


def test_pdl_starts_a_dependent_kernel_before_its_predecessor_ends():
    p = Profile(pdl_prologue_us=2.0, stream_gap_us=1.0)
    plain = place(0.0, 5.0, 10.0, 5.0, None, 1.0, False, p)
    pdl = place(0.0, 5.0, 10.0, 5.0, None, 1.0, True, p)
    assert plain.start == 11.0 and plain.end == 16.0
    assert pdl.start == 8.0 and pdl.data == 10.0 and pdl.end == 13.0   # saves gap + prologue


def test_cross_stream_dependency_adds_the_join_gap():
    p = Profile(cross_stream_gap_us=0.3)
    slot = place(0.0, 5.0, None, 0.0, 10.0, 1.0, False, p)
    assert slot.start == 11.3             # the node gap plus the join gap


def test_graph_replay_costs_one_launch_on_the_host_not_one_per_node():
    rt = Runtime(Profile(graph_launch_us=8.0, launch_host_us=5.0))
    s = rt.Stream("s")
    with rt.stream(s):
        x = rt.from_host((4,), "x", value="x1")
        with rt.graph(s) as g:
            for _ in range(20):
                x = rt.op("k", x, out_shape=(4,))
        before = rt.now
        g.replay()
        assert rt.now - before == 8.0


def test_replays_are_deterministic():
    def trace():
        from simlib.programs import scenarios
        return scenarios.run().trace.to_json()
    assert trace() == trace()


def test_profile_rejects_negative_times_and_unknown_fields():
    import pytest
    with pytest.raises(ValueError, match="must be >= 0"):
        Profile(stream_gap_us=-1)
    with pytest.raises(ValueError, match="unknown Profile field"):
        Profile().with_(gpu="h200")
    assert Profile().with_(kernel_us={"routed": 1.0}).duration("routed") == 1.0


def test_device_spans_record_eager_and_replay_phases():
    from simlib.programs import scenarios
    phases = {r.phase for r in scenarios.run().trace.records if isinstance(r, DeviceSpan)}
    assert phases == {"eager", "replay"}


def test_expressions_evaluate_to_numbers_for_an_error_size():
    from simlib.engine.values import evaluate, relative_error
    want = Sym("x2") + call("routed", Sym("x2")) + call("shared", Sym("x2"))
    got = Sym("x2") + call("routed", Sym("x2")) + call("shared", Sym("x1"))
    assert relative_error(want, want) == 0.0
    assert 0.05 < relative_error(got, want) < 5.0
    assert evaluate(got) == evaluate(Sym("x2") + call("routed", Sym("x2")) + call("shared", Sym("x1")))
