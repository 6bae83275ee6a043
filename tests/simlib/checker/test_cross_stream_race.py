"""Rule 3, ``cross_stream_race``: two nodes touch the same bytes, one writes, and no path orders them."""

from __future__ import annotations

from checker_stories import severities, streams

from simlib import Runtime
from simlib.checker import WARNING, check


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
