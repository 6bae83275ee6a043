"""Rule 1, ``host_mutation``: the host changed a tensor during the capture, then used it (a launch, a
shape read, a view)."""

from __future__ import annotations

import pytest
from checker_stories import HIDDEN, ROWS, Recorder, guarded_shared_expert, rules, scenario_findings, severities, streams

from simlib import Runtime, raw
from simlib.checker import ERROR, check
from simlib.programs.spec import MoEConfig
from simlib.trace import Mutation


def test_dispose_before_another_streams_launch_is_rules_1_and_2():
    rt = Runtime()
    main, alt = streams(rt)
    with rt.stream(main):
        h = rt.from_host((8,), "h", value="h")
        with rt.graph(main, inputs=[h]):
            x = rt.op("norm", h, out_shape=(8,), label="x")
            alt.wait_stream(main)
            rt.launch("permute", reads=[x], writes=[rt.empty((8,), "xp")])
            rt.set_(x, None, why="dispose_tensor")
            with rt.stream(alt):
                rt.launch("shared", reads=[raw(x, 8)], writes=[rt.empty((8,), "s")], label="shared")
            main.wait_stream(alt)
    findings = check(rt.trace)
    assert severities(findings) == [(1, ERROR), (2, ERROR)]
    mutation, empty = findings
    assert mutation.label == empty.label == "x"
    assert mutation.pointers[1] == 0 and mutation.pointers[0] != 0    # new (null) vs old pointer
    assert "dispose_tensor" in mutation.why and "'shared' on alt" in mutation.why
    assert empty.step > mutation.step                                 # at the launch that froze 0x0
    assert "cudaErrorIllegalAddress" in empty.why


def test_resize_to_zero_is_a_mutation_and_a_noop_resize_is_not():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        with rt.graph(main):
            t = rt.op("make", rt.empty((8,), "h"), out_shape=(8,), label="t")
            t.resize_(8)                                              # nothing changes
            rt.launch("use", reads=[t], writes=[rt.empty((8,), "a")])
            assert check(rt.trace) == []
            t.resize_(0)
            rt.launch("use_again", reads=[t], writes=[rt.empty((8,), "b")])
    findings = check(rt.trace)
    assert severities(findings) == [(1, ERROR), (2, ERROR)]
    assert findings[0].why.startswith("resize_ at step")


def test_a_repoint_before_capture_is_frozen_like_eager_and_not_reported():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        t = rt.from_host((8,), "t", value="t")
        t.set_(rt.from_host((8,), "other", value="o"))
        with rt.graph(main):
            rt.launch("use", reads=[t], writes=[rt.empty((8,), "a")])
    assert check(rt.trace) == []


@pytest.mark.parametrize("mode", ["static_buffer", "raw_kernel"])
def test_routed_first_is_the_seed_bug(mode):
    findings = scenario_findings(MoEConfig(order="routed_first", shared_mode=mode))
    seed = [f for f in findings if f.rule in (1, 2)]
    assert severities(seed) == [(1, ERROR), (2, ERROR)]
    assert {f.label for f in seed} == {"x"}
    assert all(f.pointers[1] == 0 for f in seed)          # the shared expert got a null pointer
    # the static buffer keeps the warm-up's answer (rule 7); the raw kernel's node faults instead
    frozen = [f for f in findings if f.rule == 7]
    assert [f.label for f in frozen] == (["shared_out"] if mode == "static_buffer" else [])
    for f in frozen:                                      # with the dispose and the op it emptied
        assert "set_ of 'x'" in f.why and "'shared.down' on alt" in f.why and "launched nothing" in f.why


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
