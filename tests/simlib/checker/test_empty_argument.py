"""Rule 2, ``empty_argument``: a captured launch got a tensor emptied earlier in the capture, and what
the graph holds for each consumer."""

from __future__ import annotations

from checker_stories import HIDDEN, ROWS, Recorder, rules, severities, streams

from simlib import Runtime, raw
from simlib.checker import ERROR, check
from simlib.glossary import GRAPH_HOLDS, NO_NODE, NULL_POINTER_NODE


def test_empty_arguments_are_reported_once_per_tensor_with_a_count():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        with rt.graph(main):
            x = rt.op("norm", rt.empty((8,), "h"), out_shape=(8,), label="x")
            rt.set_(x, None)
            for k in range(3):
                rt.launch(f"use{k}", reads=[raw(x, 8)], writes=[rt.empty((8,), f"o{k}")])
    empty = [f for f in check(rt.trace) if f.rule == 2]
    assert len(empty) == 1
    assert "3 captured ops" in empty[0].why and "'use0'" in empty[0].why


def test_a_view_taken_after_the_dispose_carries_it_and_one_taken_before_does_not():
    rt = Runtime()
    main, _ = streams(rt)
    with rt.stream(main):
        with rt.graph(main):
            x = rt.op("norm", rt.empty((8,), "h"), out_shape=(8,), label="x")
            before = rt.view(x, (8,), label="x_before")
            rt.set_(x, None)
            rt.launch("safe", reads=[before], writes=[rt.empty((8,), "a")])
            assert check(rt.trace) == []                               # the view kept the storage
            after = rt.view(x, (x.numel,), label="x_rows")
            rt.op("skipped", after, out_shape=after.shape)
    findings = check(rt.trace)
    assert severities(findings) == [(1, ERROR), (2, ERROR)]
    assert "through the view 'x_rows'" in findings[1].why
    assert "launched nothing" in findings[1].why


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
