"""Rule 17, ``unregistered_generator``: a captured random op draws from a generator the graph does not advance.

The property test runs it against the simulator: a sampler drawing from the default generator, from a
private one registered with the graph, or from a private one not registered, replayed two to four
times. Whenever a replay computed something other than eager, the checker reports
``unregistered_generator``; when every replay is right, it does not."""

from __future__ import annotations

from checker_stories import Tracer, W, arg
from hypothesis import event, given, settings
from hypothesis import strategies as st

from simlib.programs.gallery.case import refreshed
from simlib.programs.harness import Program, run_program
from simlib.trace import GENERATOR


def dropout(t: Tracer, generator: str) -> None:
    t.launch("dropout", arg(1, W), arg(2, W + 512, "w"), scalars=[(GENERATOR, generator), ("p", "0.1")])


def test_a_private_generator_not_registered_is_reported_once_at_its_first_node():
    t = Tracer()
    t.capture(0, lambda: (dropout(t, "tp_rng"), dropout(t, "tp_rng"), dropout(t, "default")))
    (f,) = t.check()
    assert f.code == "unregistered_generator" and f.label == "dropout: tp_rng" and f.step == 1
    assert "(registered: none)" in f.why and "1 more node" in f.why and "same numbers" in f.why
    assert "register_generator_state(tp_rng)" in f.fix


def test_the_default_generator_a_registered_one_and_eager_draws_are_fine():
    t = Tracer()
    dropout(t, "tp_rng")
    t.capture(0, lambda: (dropout(t, "tp_rng"), dropout(t, "default")), generators=("tp_rng",))
    assert t.check() == []


H = 8


def sampler(generator: str):
    def build(rt):
        x = rt.empty((H,), "x")
        gen = None if generator == "default" else rt.Generator("sampler")
        return Program(lambda: rt.random("sample", x, out_shape=(H,), generator=gen),
                       lambda k: refreshed(rt, x, "x", k), [x],
                       generators=[gen] if generator == "registered" else [])
    return build


@settings(max_examples=20, deadline=None, derandomize=True)
@given(generator=st.sampled_from(["default", "registered", "private"]), warmups=st.integers(0, 2),
       replays=st.integers(2, 4))
def test_a_replay_drawing_the_captures_numbers_is_always_reported(generator, warmups, replays):
    result = run_program(sampler(generator), warmups=warmups, replays=replays)
    frozen = "unregistered_generator" in [f.code for f in result.findings()]
    event(f"frozen={frozen}")
    assert frozen == any(not r.ok for r in result.replays), [str(r) for r in result.replays]
