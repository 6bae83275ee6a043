"""The checker is sound: it never stays silent about a replay that went wrong.

The soundness property runs random programs (two streams, fork/join, launches,
views, dispose at random points, one capture, replays with or without a
refreshed input) through the simulator and compares every replay with an
eager run of the same program on the input it was meant to get. The eager
run is the program's meaning: in host order on one stream, with
``dispose`` as a no-op (it is a memory optimisation and must not change what
is computed, which is why ``dispose=never`` is a fix). The checker may
over-report, but never stay silent about a replay that went wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from checker_stories import streams
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from simlib import IllegalAddress, Runtime, raw
from simlib.checker import check
from simlib.trace import Trace

N = 8                # elements of every tensor: equal sizes, so freed blocks get reused


KINDS = ("op",) * 4 + ("raw", "into", "view") + ("dispose",) * 3 + ("fork", "fork", "join")


DURATIONS = st.sampled_from([1.0, 3.0, 20.0])   # unequal kernels, so that races do bite


@dataclass(frozen=True)
class Program:
    """A captured body over ``env`` (0: the static input, 1: a static buffer, then new tensors).

    body       ("op", stream, srcs, us) | ("raw", stream, src, us) | ("into", stream, src, us) |
               ("view", src) | ("dispose", tensor) | ("fork",) | ("join",)
    outputs    tensors the final merge on main reads into the output buffer: all that were
               not disposed (so any corrupted value shows), plus a few picked at random
    refresh    per replay: copy a new input into the static input first?
    """

    body: tuple[tuple, ...]
    outputs: tuple[int, ...]
    refresh: tuple[bool, ...]

    @property
    def forked(self) -> bool:
        return ("fork",) in self.body


@st.composite
def programs(draw) -> Program:
    body: list[tuple] = []
    home = ["main", "main"]          # the stream each tensor was allocated on
    was_read: list[int] = []         # region tensors some launch read: what code disposes ...
    read_across: list[int] = []      # ... and those another stream read: the seed's pattern
    forked = False
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(KINDS))
        stream = draw(st.sampled_from(("main", "alt"))) if forked else "main"
        pick = st.integers(0, len(home) - 1)
        srcs: tuple[int, ...] = ()
        if kind == "op":
            srcs = tuple(draw(st.lists(pick, min_size=1, max_size=2)))
            body.append(("op", stream, srcs, draw(DURATIONS)))
        elif kind in ("raw", "into"):
            srcs = (draw(pick),)
            body.append((kind, stream, srcs[0], draw(DURATIONS)))
        elif kind == "view":
            body.append(("view", draw(pick)))
            home.append(home[body[-1][1]])
        elif kind == "dispose" and len(home) > 2:
            choices = [st.integers(2, len(home) - 1)]
            choices += [st.sampled_from(ids) for ids in (was_read, read_across) if ids]
            body.append(("dispose", draw(st.one_of(choices))))
        elif kind == "fork" or (kind == "join" and forked):
            body.append((kind,))
            forked = True
        was_read += [j for j in srcs if j >= 2 and j not in was_read]
        read_across += [j for j in srcs if j >= 2 and home[j] != stream and j not in read_across]
        if kind in ("op", "raw"):
            home.append(stream)
    disposed = {stmt[1] for stmt in body if stmt[0] == "dispose"}
    kept = {j for j in range(2, len(home)) if j not in disposed}     # every result stays visible
    picked = draw(st.lists(st.integers(0, len(home) - 1), min_size=1, max_size=3))
    outputs = tuple(sorted(kept.union(picked)))
    refresh = tuple(draw(st.lists(st.integers(0, 7).map(bool), min_size=1, max_size=3)))
    return Program(tuple(body), outputs, refresh)


def run_body(rt: Runtime, program: Program, env: list, out, main, alt, *, captured: bool) -> None:
    """The program's body; eagerly (``captured=False``) it runs on main and never disposes."""
    for i, stmt in enumerate(program.body):
        kind = stmt[0]
        if kind in ("fork", "join"):
            if captured:
                (alt.wait_stream(main) if kind == "fork" else main.wait_stream(alt))
        elif kind == "dispose":
            if captured:
                rt.set_(env[stmt[1]], None, why="dispose")
        elif kind == "view":
            src = env[stmt[1]]
            env.append(rt.view(src, src.shape, label=f"v{i}"))
        else:
            us = stmt[3]
            with rt.stream(alt if captured and stmt[1] == "alt" else main):
                if kind == "op":
                    srcs = [env[j] for j in stmt[2]]
                    env.append(rt.op(f"k{i}", *srcs, out_shape=srcs[0].shape, label=f"t{i}",
                                     duration_us=us))
                elif kind == "raw":
                    env.append(rt.empty((N,), f"t{i}"))
                    rt.launch(f"raw{i}", reads=[raw(env[stmt[2]], N)], writes=[env[-1]],
                              duration_us=us)
                else:   # "into": the static buffer, sized like its input (skipped when empty)
                    src = env[stmt[2]]
                    rt.launch(f"into{i}", reads=[src], writes=[rt.view(env[1], src.shape)],
                              duration_us=us)
    if captured and program.forked:
        main.wait_stream(alt)
    rt.launch("merge", reads=[env[j] for j in program.outputs], writes=[out])


def setup(rt: Runtime):
    main, alt = streams(rt)
    rt.current_stream = main
    env = [rt.from_host((N,), "inp", value="in0"), rt.zeros((N,), "buf")]
    return main, alt, env, rt.empty((N,), "out")


def replayed(program: Program) -> tuple[list, Trace]:
    """Capture once, replay once per ``refresh`` entry; the outputs and the trace."""
    rt = Runtime()
    main, alt, env, out = setup(rt)
    with rt.graph(main, label="body", inputs=[env[0]]) as g:
        run_body(rt, program, list(env), out, main, alt, captured=True)
    outputs: list = []
    for k, refresh in enumerate(program.refresh, 1):
        if refresh:
            env[0].copy_(rt.from_host((N,), value=f"in{k}"))
        try:
            g.replay()
            outputs.append(rt.read(out))
        except IllegalAddress:
            outputs.append("cudaErrorIllegalAddress")
            break
    return outputs, rt.trace


def eager(program: Program) -> list:
    """What each replay should give: the body run eagerly on replay k's intended input."""
    rt = Runtime()
    main, alt, env, out = setup(rt)
    outputs = []
    for k in range(1, len(program.refresh) + 1):
        env[0].copy_(rt.from_host((N,), value=f"in{k}"))
        run_body(rt, program, list(env), out, main, alt, captured=False)
        outputs.append(rt.read(out))
    return outputs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_a_silent_checker_means_replay_equals_eager(program):
    got, trace = replayed(program)
    findings = check(trace)
    if got != eager(program):
        assert findings, f"replay differs from eager, but the checker is silent: {program}"
    assert check(Trace.from_json(trace.to_json())) == findings


# What the generator can make is a property of the generator, so look for it deterministically
# (derandomize), and stop at the first example (shrinking would cost most of the time).
FIND = settings(max_examples=2000, deadline=None, database=None, derandomize=True,
                phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])


def test_the_generator_makes_both_buggy_and_clean_programs_that_dispose():
    def disposes(p: Program) -> bool:
        return any(s[0] == "dispose" for s in p.body) and p.forked

    buggy = find(programs(), lambda p: disposes(p) and replayed(p)[0] != eager(p), settings=FIND)
    clean = find(programs(), lambda p: disposes(p) and not check(replayed(p)[1]), settings=FIND)
    assert replayed(buggy)[0] != eager(buggy)
    assert replayed(clean)[0] == eager(clean) and check(replayed(clean)[1]) == []


@pytest.mark.parametrize("rule", [1, 2, 3, 4, 5])
def test_the_generator_reaches_every_rule(rule):
    def fires(p: Program) -> bool:
        return any(f.rule == rule for f in check(replayed(p)[1]))

    assert fires(find(programs(), fires, settings=FIND))
