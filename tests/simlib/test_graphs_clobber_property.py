"""Rule 11 against the simulator: two graphs, in one pool or two, outputs kept strong or weak, replayed
and read in any order. Whenever a read computed something other than eager, and no later replay of its
own graph explains it, the checker reports ``graphs_clobber``; when every read is right, it does not."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from simlib.programs.gallery.case import refreshed
from simlib.programs.harness import Program, Session

H = 64


def two_graphs(rows: tuple[int, int], weak: bool):
    def build(rt):
        def program(r: int) -> Program:
            x = rt.empty((r, H), f"x_bs{r}")

            def forward():
                h = rt.op("mlp_up", x, out_shape=(r, 2 * H), label=f"h_bs{r}")
                out = rt.op("mlp_down", h, out_shape=(r, H), label=f"out_bs{r}")
                rt.release(h)
                return out

            def keep_weakly(out):
                kept = rt.weak_ref(out, label=out.label)
                rt.release(out)
                return kept
            return Program(forward, lambda k: refreshed(rt, x, "x", k), [x],
                           after_capture=keep_weakly if weak else None)
        return {"a": program(rows[0]), "b": program(rows[1])}
    return build


@settings(max_examples=100, deadline=None, derandomize=True)
@given(rows=st.tuples(st.integers(1, 3), st.integers(1, 3)), weak=st.sampled_from([True, True, False]),
       shared=st.sampled_from([True, True, False]),
       steps=st.lists(st.sampled_from(["a", "b", "read a", "read b"]), min_size=1, max_size=6))
def test_a_wrong_read_between_graphs_is_always_reported(rows, weak, shared, steps):
    session = Session(two_graphs(rows, weak))
    session.warm_up("a", calls=1)
    session.capture("a")
    session.warm_up("b", calls=1)
    session.capture("b", pool_of="a" if shared else None)
    unread = {}
    for step in steps:
        name = step.removeprefix("read ")
        if step.startswith("read"):
            if name in unread:
                unread.pop(name)()
            continue
        if name in unread:            # its own next replay would overwrite it: read it first
            unread.pop(name)()
        unread[name] = session.replay(name, read=False)
    for read in unread.values():
        read()
    result = session.result()
    clobbered = "graphs_clobber" in [f.code for f in result.findings()]
    event(f"clobbered={clobbered}")
    assert clobbered == any(not r.ok for r in result.replays), [str(r) for r in result.replays]
