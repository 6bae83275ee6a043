"""Property tests over random programs: stream order, dependencies, determinism, errors.

Each program is a list of instructions for a small interpreter over a Runtime:
launches on two streams, forks and joins, host-side set_ and release, syncs
and host reads, one capture and a few replays. Random programs make mistakes
on purpose; the only exceptions allowed are the modelled CUDA errors.
"""

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simlib import Runtime, SimulatedError, raw
from simlib.trace import DeviceSpan, Launch

N_TENSORS = 4
OPS = st.one_of(
    st.tuples(st.just("launch"), st.integers(0, 1), st.lists(st.integers(0, N_TENSORS - 1), max_size=2),
              st.integers(0, N_TENSORS - 1), st.sampled_from([1.0, 3.0, 20.0]), st.booleans()),
    st.tuples(st.just("raw_launch"), st.integers(0, 1), st.integers(0, N_TENSORS - 1),
              st.integers(0, N_TENSORS - 1)),
    st.tuples(st.just("wait_stream"), st.integers(0, 1)),
    st.tuples(st.just("set_empty"), st.integers(0, N_TENSORS - 1)),
    st.tuples(st.just("release"), st.integers(0, N_TENSORS - 1)),
    st.tuples(st.just("alloc"), st.integers(0, N_TENSORS - 1), st.integers(0, 1)),
    st.tuples(st.just("record_wait"), st.integers(0, 1)),
    st.tuples(st.just("sync"),),
    st.tuples(st.just("item"), st.integers(0, N_TENSORS - 1)),
)
PROGRAMS = st.tuples(st.lists(OPS, max_size=6), st.lists(OPS, max_size=10), st.integers(0, 3),
                     st.booleans())


def execute(program) -> Runtime:
    """Run ``program``: eager prologue, a capture of the body, then replays."""
    prologue, body, replays, refresh = program
    rt = Runtime()
    streams = [rt.Stream("s0"), rt.Stream("s1")]
    with rt.stream(streams[0]):
        try:
            tensors = [rt.from_host((4, 8), f"t{i}", value=f"v{i}") for i in range(N_TENSORS)]
            run_ops(rt, streams, tensors, prologue)
            static_in = rt.from_host((4, 8), "static_in", value="in1")
            with rt.graph(streams[0], inputs=[static_in]) as g:
                rt.launch("load", reads=[static_in], writes=[tensors[0]])
                run_ops(rt, streams, tensors, body)
                streams[0].wait_stream(streams[1])
            for k in range(replays):
                if refresh:
                    static_in.copy_(rt.from_host((4, 8), f"in{k + 2}", value=f"in{k + 2}"))
                g.replay()
            rt.synchronize()
        except SimulatedError:
            pass                      # a modelled CUDA error: the program made a mistake
    return rt


def run_ops(rt, streams, tensors, ops) -> None:
    for op in ops:
        kind = op[0]
        if kind == "launch":
            _, s, reads, write, duration, pdl = op
            with rt.stream(streams[s]):
                rt.launch("k", reads=[tensors[i] for i in reads], writes=[tensors[write]],
                          duration_us=duration, pdl=pdl)
        elif kind == "raw_launch":
            _, s, read, write = op
            with rt.stream(streams[s]):
                rt.launch("raw", reads=[raw(tensors[read], 32)], writes=[tensors[write]])
        elif kind == "wait_stream":
            streams[op[1]].wait_stream(streams[1 - op[1]])
        elif kind == "set_empty":
            tensors[op[1]].set_(None)
        elif kind == "release":
            tensors[op[1]].release()
        elif kind == "alloc":
            with rt.stream(streams[op[2]]):
                tensors[op[1]] = rt.empty((4, 8), f"t{op[1]}")
        elif kind == "record_wait":
            streams[1 - op[1]].wait_event(streams[op[1]].record_event())
        elif kind == "sync":
            rt.synchronize()
        elif kind == "item":
            rt.item(tensors[op[1]])


def spans_by(trace):
    launches = {r.id: r for r in trace.records if isinstance(r, Launch)}
    groups = defaultdict(list)
    for r in trace.records:
        if isinstance(r, DeviceSpan):
            groups[r.phase, r.replay, r.stream].append((launches[r.launch], r))
    return launches, groups


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(PROGRAMS)
def test_only_modelled_errors_escape_and_runs_are_deterministic(program):
    first, second = execute(program), execute(program)    # execute() lets only SimulatedError through
    assert first.trace.to_json() == second.trace.to_json()


@SETTINGS
@given(PROGRAMS)
def test_each_stream_is_fifo(program):
    _, groups = spans_by(execute(program).trace)
    for spans in groups.values():
        for (_, a), (launch_b, b) in zip(spans, spans[1:]):
            assert b.end_us >= a.end_us                    # completes in issue order
            if not launch_b.pdl:
                assert b.start_us >= a.end_us              # and, without PDL, never overlaps


@SETTINGS
@given(PROGRAMS)
def test_no_node_reads_before_its_dependencies_finish(program):
    launches, groups = spans_by(execute(program).trace)
    for (phase, replay, _), spans in groups.items():
        if phase != "replay":
            continue
        end = {launch.id: span.end_us for g in groups if g[:2] == (phase, replay)
               for launch, span in groups[g]}
        for launch, span in spans:
            for dep in launch.deps:
                slack = 0.0 if not launch.pdl or launches[dep].stream != launch.stream else 1e9
                assert span.start_us + slack >= end[dep]
                assert span.end_us >= end[dep]
