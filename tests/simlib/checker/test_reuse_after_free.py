"""Rule 4, ``reuse_after_free``: the graph's pool handed a freed block out again while another stream may
still read it."""

from __future__ import annotations

import pytest
from checker_stories import NBYTES, Recorder, reorder_fix, rules, scenario_findings, severities, streams

from simlib import Runtime
from simlib.checker import WARNING, check
from simlib.programs.spec import MoEConfig
from simlib.trace import Free


def test_a_block_reused_after_free_while_another_stream_reads_it_is_rule_4_not_3():
    for dispose_after_join in (False, True):
        rt = Runtime()
        main, alt = streams(rt)
        with rt.stream(main):
            with rt.graph(main):
                h = rt.empty((8,), "h")
                x = rt.op("norm", h, out_shape=(8,), label="x")
                alt.wait_stream(main)
                with rt.stream(alt):
                    rt.launch("shared", reads=[x], writes=[rt.empty((8,), "s")])
                if dispose_after_join:
                    main.wait_stream(alt)
                old = x.ptr
                rt.set_(x, None)
                y = rt.op("routed", h, out_shape=(8,), label="y")
                assert y.ptr == old                                 # the graph pool reused x's block
                main.wait_stream(alt)
        findings = check(rt.trace)
        if dispose_after_join:
            assert findings == []
        else:
            assert severities(findings) == [(4, WARNING)]
            assert findings[0].label == "x" and findings[0].pointers == (old,)
            assert "'shared' on stream alt" in findings[0].why and "'y'" in findings[0].why


def test_the_reuse_race_bites_when_the_reading_stream_runs_late():
    """Host order put 'shared' before the dispose; the device need not (why rule 4 warns)."""
    seen = {}
    for late in (False, True):
        rt = Runtime()
        main, alt = streams(rt)
        with rt.stream(main):
            inp = rt.from_host((8,), "inp", value="in1")
            with rt.graph(main, inputs=[inp]) as g:
                x = rt.op("norm", inp, out_shape=(8,), label="x")
                alt.wait_stream(main)
                with rt.stream(alt):
                    if late:
                        rt.launch("busy", writes=[rt.empty((8,), "b")], duration_us=20.0)
                    shared = rt.op("shared", x, out_shape=(8,), label="shared")
                rt.set_(x, None)
                routed = rt.op("routed", inp, out_shape=(8,), label="routed")
                main.wait_stream(alt)
                out = rt.add(routed, shared, label="out")
            inp.copy_(rt.from_host((8,), value="in2"))
            g.replay()
            seen[late] = str(rt.read(out)), severities(check(rt.trace))
    assert seen[False] == ("routed(in2) + shared(norm(in2))", [(4, WARNING)])
    assert seen[True] == ("routed(in2) + shared(routed(in2))", [(4, WARNING)])


@pytest.mark.parametrize("mode", ["plain", "raw_kernel"])
def test_shared_first_is_correct_but_the_reused_block_is_a_race(mode):
    """PR #29463's reorder: right on every run here, fragile in principle (rule 4)."""
    findings = scenario_findings(MoEConfig(order="shared_first", shared_mode=mode))
    assert severities(findings) == [(4, WARNING)]
    assert findings[0].label == "x" and "stream alt" in findings[0].why


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
