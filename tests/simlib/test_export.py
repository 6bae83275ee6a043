"""Chrome Trace Event export: valid structure, readable tracks, flows, determinism."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

import pytest

from simlib.export import GPU_PID, HOST_PID, to_chrome_trace, write_chrome_trace
from simlib.programs import scenarios
from simlib.programs.spec import MoEConfig
from simlib.trace import Call, DeviceSpan, Launch, Mutation, Replay, Trace

EPS = 1e-6
REQUIRED = {
    "X": {"name", "cat", "pid", "tid", "ts", "dur", "args"},
    "i": {"name", "cat", "pid", "tid", "ts", "s", "args"},
    "M": {"name", "pid", "tid", "args"},
    "s": {"name", "cat", "pid", "tid", "ts", "id"},
    "f": {"name", "cat", "pid", "tid", "ts", "id", "bp"},
}
STREAM_TRACK = re.compile(r"stream \d+ \((\w+)\)( · PDL overlap( \d+)?)?")

CONFIGS = {
    "correct": MoEConfig(order="shared_first"),
    "silent": MoEConfig(),
    "fault": MoEConfig(shared_mode="raw_kernel"),
    "pdl": MoEConfig(order="shared_first", pdl=True, layers=2),
    "capture_error": MoEConfig(shared_mode="plain"),
}


def export(name: str) -> tuple[Trace, dict]:
    trace = scenarios.run(CONFIGS[name]).trace
    return trace, to_chrome_trace(trace)


def validate(doc: dict) -> None:
    """What Perfetto and chrome://tracing need, checked strictly."""
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    events = doc["traceEvents"]
    for e in events:
        assert REQUIRED[e["ph"]] <= e.keys(), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
        if e["ph"] == "f":
            assert e["bp"] == "e"
    _named_tracks(events)
    _slices_nest(events)
    _flows_pair_and_bind(events)


def _named_tracks(events: list[dict]) -> None:
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert processes == {HOST_PID: "host", GPU_PID: "GPU 0"}
    for e in events:
        if e["ph"] != "M":
            assert (e["pid"], e["tid"]) in threads, f"unnamed track for {e}"
    for (pid, _), name in threads.items():
        assert name == "host" if pid == HOST_PID else STREAM_TRACK.fullmatch(name), name


def _slices_nest(events: list[dict]) -> None:
    """On one track, complete events are disjoint or nested, never partially overlapping."""
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[e["pid"], e["tid"]].append((e["ts"], -e["dur"], e))
    for slices in tracks.values():
        open_ends: list[float] = []
        for ts, neg_dur, e in sorted(slices, key=lambda s: s[:2]):
            while open_ends and open_ends[-1] <= ts + EPS:
                open_ends.pop()
            end = ts - neg_dur
            assert not open_ends or end <= open_ends[-1] + EPS, f"partial overlap at {e}"
            open_ends.append(end)


def _flows_pair_and_bind(events: list[dict]) -> None:
    starts = {(e["cat"], e["id"]): e for e in events if e["ph"] == "s"}
    finishes = {(e["cat"], e["id"]): e for e in events if e["ph"] == "f"}
    assert len(starts) == sum(e["ph"] == "s" for e in events)       # ids are unique
    assert starts.keys() == finishes.keys()
    for key, s in starts.items():
        f = finishes[key]
        assert f["ts"] >= s["ts"]
        assert _enclosing(events, s) and _enclosing(events, f), key


def _enclosing(events: list[dict], flow: dict) -> bool:
    return any(e["ph"] == "X" and (e["pid"], e["tid"]) == (flow["pid"], flow["tid"])
               and e["ts"] - EPS <= flow["ts"] <= e["ts"] + e["dur"] + EPS for e in events)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_export_is_a_valid_chrome_trace(name):
    _, doc = export(name)
    validate(doc)
    json.dumps(doc)                                        # plain JSON all the way down


def test_every_kernel_run_is_one_slice_with_a_flow_from_its_host_step():
    trace, doc = export("silent")
    spans = list(trace.of(DeviceSpan))
    kernels = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == GPU_PID]
    assert len(kernels) == len(spans)
    assert sum(e["ph"] == "f" for e in doc["traceEvents"]) == len(spans)
    replay_flows = [e for e in doc["traceEvents"] if e["ph"] == "s" and e["name"] == "replay"]
    assert len(replay_flows) == sum(s.phase == "replay" for s in spans)


def test_host_track_has_one_slice_per_host_step():
    trace, doc = export("silent")
    steps = {r.step for r in trace.records if not isinstance(r, (DeviceSpan, Call))}   # a call is a mark
    host = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == HOST_PID]
    assert sorted(e["args"]["step"] for e in host) == sorted(steps)
    sync = next(e for e in host if e["name"] == "synchronize")
    last_kernel_before = max(s.end_us for s in trace.of(DeviceSpan) if s.step < sync["args"]["step"])
    assert sync["ts"] + sync["dur"] == pytest.approx(last_kernel_before)   # the host waited


def test_streams_are_named_like_kineto_with_the_simlib_name():
    _, doc = export("correct")
    names = sorted(e["args"]["name"] for e in doc["traceEvents"]
                   if e["name"] == "thread_name" and e["pid"] == GPU_PID)
    assert names == ["stream 7 (main)", "stream 8 (alt)"]
    assert doc["otherData"]["streams"] == {"main": "stream 7", "alt": "stream 8"}


def test_pdl_overlap_goes_to_an_extra_track_of_its_stream():
    trace, doc = export("pdl")
    launches = {r.id: r for r in trace.of(Launch)}
    main = sorted((s.start_us, s.end_us) for s in trace.of(DeviceSpan) if s.stream == "main")
    assert any(b[0] < a[1] for a, b in zip(main, main[1:]))   # the raw spans do overlap
    tracks = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    overlap = [tid for tid, name in tracks.items() if name == "stream 7 (main) · PDL overlap"]
    assert len(overlap) == 1
    moved = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == overlap[0]]
    assert moved and all(launches[e["args"]["launch"]].pdl for e in moved)


def test_kernels_show_the_pointers_the_host_froze():
    _, doc = export("fault")
    eager, replayed = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == GPU_PID
                       and e["name"] == "shared_gate_up_triton"]
    assert eager["args"]["phase"] == "eager" and not eager["args"]["frozen_args"]["in0"].startswith("x 0x0 ")
    assert replayed["args"]["phase"] == "replay" and replayed["args"]["graph"] == 0
    assert replayed["args"]["frozen_args"]["in0"].startswith("x 0x0 ")   # the null it faults on


def test_mutations_captures_replays_and_faults_are_instants():
    trace, doc = export("fault")
    instants = Counter(e["cat"] for e in doc["traceEvents"] if e["ph"] == "i")
    assert instants == {"mutation": sum(1 for _ in trace.of(Mutation)), "capture": 2,
                        "replay": sum(1 for _ in trace.of(Replay)), "fault": 1, "call": sum(1 for _ in trace.of(Call))}
    dispose = next(e for e in doc["traceEvents"] if e["ph"] == "i" and e["cat"] == "mutation"
                   and e["args"]["graph"] == 0)
    assert dispose["name"] == "set_ x" and dispose["args"]["new_ptr"] == "0x0"


def test_a_failed_capture_still_exports_what_happened():
    _, doc = export("capture_error")
    end = next(e for e in doc["traceEvents"] if e["name"] == "capture end (graph 0)")
    assert end["args"]["error"] == "aborted"


def test_same_trace_gives_byte_identical_json(tmp_path):
    first = write_chrome_trace(scenarios.run(CONFIGS["pdl"]).trace, tmp_path / "a.json")
    second = write_chrome_trace(scenarios.run(CONFIGS["pdl"]).trace, tmp_path / "b.json")
    assert first.read_bytes() == second.read_bytes()
    trace = scenarios.run(CONFIGS["pdl"]).trace
    assert to_chrome_trace(Trace.from_json(trace.to_json())) == to_chrome_trace(trace)


def test_an_empty_trace_exports_only_metadata():
    doc = to_chrome_trace(Trace())
    validate(doc)
    assert {e["ph"] for e in doc["traceEvents"]} == {"M"}
