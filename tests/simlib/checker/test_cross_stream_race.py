"""Rule 3, ``cross_stream_race``: two nodes touch the same bytes, one writes, and no path orders them."""

from __future__ import annotations

from checker_stories import severities, streams

from simlib import Runtime
from simlib.checker import WARNING, check
from simlib.checker.index import Graph
from simlib.checker.rule_races import races
from simlib.trace import Arg, Launch


def test_unordered_cross_stream_write_and_read_is_rule_3():
    for joined in (False, True):
        rt = Runtime()
        main, alt = streams(rt)
        with rt.stream(main):
            buf = rt.zeros((8,), "buf")
            with rt.graph(main):
                alt.wait_stream(main)
                with rt.stream(alt):
                    writer = rt.launch("writer", writes=[buf])
                if joined:
                    main.wait_stream(alt)
                reader = rt.launch("reader", reads=[buf], writes=[rt.empty((8,), "out")])
                main.wait_stream(alt)
        findings = check(rt.trace)
        if joined:
            assert findings == []
        else:
            assert severities(findings) == [(3, WARNING)]
            assert findings[0].step == reader.step > writer.step
            assert findings[0].label == "buf" and findings[0].pointers == (buf.ptr,)


def test_reachability_is_transitive_across_streams():
    rt = Runtime()
    main, alt = streams(rt)
    with rt.stream(main):
        buf = rt.zeros((8,), "buf")
        with rt.graph(main):
            rt.launch("first", writes=[buf])
            rt.launch("middle", writes=[rt.empty((8,), "m")])
            alt.wait_stream(main)
            with rt.stream(alt):
                rt.launch("step", writes=[rt.empty((8,), "s")])
                rt.launch("last", reads=[buf], writes=[rt.empty((8,), "o")])
            main.wait_stream(alt)
    assert check(rt.trace) == []


def test_nodes_on_one_stream_are_ordered_only_where_the_trace_chains_them():
    """Rule 3 skips ranges touched on one stream alone only when every node follows the one before
    it on its stream: a trace whose same-stream nodes carry no such dependency is checked pair by pair."""
    def node(i: int, deps: tuple[int, ...]) -> Launch:
        arg = Arg("out0", 1, "buf", 4096, 8, (8,), 32, "w")
        return Launch(i, 0.0, 100 + i, "k", f"k{i}", "", "s", (arg,), 0, deps)

    chained = Graph(0, nodes=[node(0, ()), node(1, (100,))])
    unchained = Graph(0, nodes=[node(0, ()), node(1, ())])
    assert list(races(chained)) == []
    assert [f.rule for f in races(unchained)] == [3]
