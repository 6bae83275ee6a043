"""Rule 10 against the simulator: a table built before the capture and read by the graph, freed during the
capture, after it, or never, while other tensors come and go. Whenever a replay computed something other
than eager, the checker reports ``freed_under_graph``; a table kept alive is never reported."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from simlib.programs.gallery.case import refreshed
from simlib.programs.harness import Program, Session

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
