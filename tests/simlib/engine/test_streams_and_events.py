"""Stories about stream order, events and the legacy default stream."""

import pytest

from simlib import Runtime
from simlib.trace import DeviceSpan


def spans(rt, stream):
    return [r for r in rt.trace.records if isinstance(r, DeviceSpan) and r.stream == stream]


def test_work_on_one_stream_runs_in_fifo_order_without_overlap():
    rt = Runtime()
    s = rt.Stream("s")
    with rt.stream(s):
        x = rt.empty((8,), "x")
        for _ in range(5):
            rt.launch("k", reads=[x], writes=[x])
    ss = spans(rt, "s")
    assert all(a.end_us <= b.start_us for a, b in zip(ss, ss[1:]))


def test_two_streams_overlap_unless_an_event_orders_them():
    rt = Runtime()
    a, b = rt.Stream("a"), rt.Stream("b")
    with rt.stream(a):
        rt.launch("long", writes=[rt.empty((8,), "p")], duration_us=50)
    with rt.stream(b):
        rt.launch("other", writes=[rt.empty((8,), "q")], duration_us=5)
    assert spans(rt, "b")[0].start_us < spans(rt, "a")[0].end_us        # overlap
    b.wait_stream(a)
    with rt.stream(b):
        rt.launch("after", writes=[rt.empty((8,), "r")])
    after = spans(rt, "b")[-1]
    assert after.start_us >= spans(rt, "a")[0].end_us + rt.profile.cross_stream_gap_us


def test_event_query_and_synchronize():
    rt = Runtime()
    a = rt.Stream("a")
    with rt.stream(a):
        rt.launch("long", writes=[rt.empty((8,), "p")], duration_us=1000)
    e = a.record_event()
    assert e.query() is False          # the host is far ahead of the device
    e.synchronize()
    assert e.query() is True and rt.now >= e.time


def test_legacy_default_stream_synchronises_with_blocking_streams_only():
    rt = Runtime()
    blocking = rt.Stream("blocking", blocking=True)
    nonblocking = rt.Stream("nonblocking")
    for s in (blocking, nonblocking):
        with rt.stream(s):
            rt.launch("long", writes=[rt.empty((8,), f"p_{s.name}")], duration_us=100)
    rt.launch("legacy", writes=[rt.empty((8,), "q")])      # current stream is the legacy default
    legacy = spans(rt, "default")[0]
    assert legacy.start_us >= spans(rt, "blocking")[0].end_us
    assert legacy.start_us < spans(rt, "nonblocking")[0].end_us


def test_stream_names_are_unique_and_stream_context_takes_streams():
    rt = Runtime()
    rt.Stream("a")
    with pytest.raises(ValueError, match="already exists"):
        rt.Stream("a")
    with pytest.raises(TypeError, match="takes a Stream"):
        with rt.stream("a"):
            pass
