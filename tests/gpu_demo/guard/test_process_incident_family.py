"""The whole-process check as strong as ``check_capture``, on a CPU (the GPU played by ``gpu_fakes``).

The eager calls a program makes before it captures are recorded and split into
calls (``simlib.checker.calls``), so the rules that compare calls fire; the
replays and frees after a capture are recorded, so the rules about memory a
graph still uses fire at the replay; the warning points at the user's line.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import CAPTURE, FakeGraph, cuda_graph, fake_graph_methods, recording, runtime, streams  # noqa: E402

from gpu_demo import CaptureHazardWarning, capture_checked  # noqa: E402
from gpu_demo.guard.no_capture import NoCaptureWarning  # noqa: E402
from gpu_demo.guard.process import CaptureChecker  # noqa: E402
from simlib.checker.calls import with_calls  # noqa: E402
from simlib.trace import Call, Capture, Launch  # noqa: E402

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


class Scaled(torch.nn.Module):
    """Changes a Python float every call (vLLM #46913)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale += 0.25
        return (x * self.scale).relu()


def rules(checker: CaptureChecker) -> set[str]:
    return {f.code for report in checker.reports for f in report.findings}


# -- calls inferred from the capture ------------------------------------------------------------

class Stack(torch.nn.Module):
    """Three layers through one call site each: the capture's first launch repeats within a call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = (x * 2).relu()
        return x


def test_each_eager_call_is_bracketed_by_the_repetitions_of_the_captures_first_launch(streams, fake_graph_methods):
    stack, x = Stack(), torch.randn(4)
    with recording(streams) as recorder:
        x.add(1)                         # before the calls: in none of them
        for _ in range(2):
            stack(x)
        with cuda_graph(FakeGraph(), streams):
            stack(x)
    records = with_calls(recorder.trace.records, 0)
    calls = [(r.op, r.index, r.phase) for r in records if type(r) is Call]
    assert calls == [("begin", 0, "eager"), ("end", 0, "eager"), ("begin", 1, "eager"), ("end", 1, "eager"),
                     ("begin", 2, "capture"), ("end", 2, "capture")]
    inside: list[list[str]] = []
    for r in records:
        if type(r) is Call and r.op == "begin":
            inside.append([])
        elif type(r) is Launch and inside and len(inside[-1]) < 6:
            inside[-1].append(r.kernel.split(".")[1])
    assert inside[0] == inside[1] == ["mul", "relu"] * 3
    first = next(r for r in records if type(r) is Launch)
    assert first.kernel.startswith("aten.add") and records.index(first) < records.index(
        next(r for r in records if type(r) is Call))
    assert with_calls(records, 0) is records        # already bracketed: left as it is


def test_a_host_value_changing_between_the_programs_eager_calls_is_caught_at_the_capture(streams,
                                                                                         fake_graph_methods):
    layer, x = Scaled(), torch.randn(8)
    with pytest.warns(CaptureHazardWarning, match="frozen_host_value"):
        with capture_checked(on_hazard="warn", device=streams.device()) as checked:
            for _ in range(2):
                layer(x)
            with cuda_graph(FakeGraph(), streams):
                layer(x)
    assert rules(checked) == {"frozen_host_value"}


def test_each_record_is_fed_to_the_checker_once_and_its_findings_name_the_final_streams(streams, fake_graph_methods):
    # A check costs what happened since the last one: every record reaches the checker once, as it is
    # (stream keys, no copies), and only what was found is renamed.
    layer, x = Scaled(), torch.randn(8)
    fed = []
    with capture_checked(on_hazard="warn", device=streams.device()) as checked:
        feed = checked.checker.feed
        def counting(records):
            records = list(records)
            fed.append([(r, getattr(r, "stream", None)) for r in records])
            return feed(records)
        checked.checker.feed = counting
        for _ in range(2):
            layer(x)
        with pytest.warns(CaptureHazardWarning) as warned, cuda_graph(FakeGraph(), streams):
            layer(x)
        for _ in range(3):
            x.add(1)
            torch.cuda.CUDAGraph.replay(FakeGraph())   # a graph nobody captured: not recorded
    every = [r for batch in fed for r, _ in batch]
    assert len({id(r) for r in every}) == len(every) == len(checked.recorder.trace.records)
    assert all(r is kept for r, kept in zip(every, checked.recorder.trace.records))
    assert all(stream.startswith("cuda-stream-") for batch in fed for r, stream in batch if type(r) is Launch)
    (finding,) = [f for report in checked.reports for f in report.findings]
    assert "on main at step" in finding.why and "cuda-stream-" not in str(warned[0].message)


def test_the_warning_at_a_capture_end_points_at_the_users_line_that_ended_it(streams, fake_graph_methods):
    layer, x, graph = Scaled(), torch.randn(8), FakeGraph()
    with capture_checked(on_hazard="warn", device=streams.device()):
        for _ in range(2):
            layer(x)
        with streams.on(CAPTURE):
            torch.cuda.CUDAGraph.capture_begin(graph)
            layer(x)
            with pytest.warns(CaptureHazardWarning, match="frozen_host_value") as warned:
                torch.cuda.CUDAGraph.capture_end(graph)
    assert warned[0].filename == __file__


def test_a_host_value_constant_across_calls_is_no_finding(streams, fake_graph_methods):
    x = torch.randn(8)
    with capture_checked(device=streams.device()) as checked:
        for _ in range(3):
            (x * 0.5).relu()
        with cuda_graph(FakeGraph(), streams):
            (x * 0.5).relu()
    assert rules(checked) == set()


# -- memory after the capture ---------------------------------------------------------------------

def test_a_block_the_graph_uses_freed_before_a_replay_is_reported_at_that_replay_pointing_at_it(
        streams, fake_graph_methods):
    graph = FakeGraph()
    with capture_checked(on_hazard="warn", device=streams.device()) as checked:
        x = torch.randn(64) * 1              # allocated before the capture, outside the graph's pool
        with cuda_graph(graph, streams):
            x.mul(2)
        torch.cuda.CUDAGraph.replay(graph)   # nothing happened since the capture: no check
        assert len(checked.reports) == 1
        runtime.memory_deallocation(x.untyped_storage().data_ptr())   # the allocator takes the block back
        with pytest.warns(CaptureHazardWarning, match="freed_under_graph") as warned:
            torch.cuda.CUDAGraph.replay(graph)
    assert warned[0].filename == __file__     # the user's line that replayed
    (report,) = [r for r in checked.reports if r.findings]
    assert [f.code for f in report.findings] == ["freed_under_graph"] and "replay #1 of graph 0" in report.text
    assert len(checked.reports) == 2          # reported once: the check at the block's end found nothing new


def test_a_free_of_memory_no_graph_uses_is_no_finding(streams, fake_graph_methods):
    graph = FakeGraph()
    with capture_checked(device=streams.device()) as checked:
        x, other = torch.randn(64) * 1, torch.randn(64) * 1
        with cuda_graph(graph, streams):
            x.mul(2)
        torch.cuda.CUDAGraph.replay(graph)
        other.add(1)
        runtime.memory_deallocation(other.untyped_storage().data_ptr())
        torch.cuda.CUDAGraph.replay(graph)
    assert rules(checked) == set() and [r.graph for r in checked.reports] == [0]


def serve(checker: CaptureChecker, graphs: list[FakeGraph], steps: int, work) -> None:
    """``steps`` served steps: each replays the graphs in turn, then runs ``work(step)``."""
    for step in range(steps):
        torch.cuda.CUDAGraph.replay(graphs[step % len(graphs)])
        work(step)


def test_the_whole_process_check_keeps_no_history_and_each_check_reads_only_what_is_new(
        streams, fake_graph_methods):
    # A server's life: the checker is fed each record once and drops it; what it keeps is per graph.
    graphs = [FakeGraph(), FakeGraph()]
    fed: list[int] = []
    with recording(streams) as recorder:
        checker = CaptureChecker(recorder, strict=True, on_hazard="warn", whole_process=True)
        feed = checker.checker.feed
        checker.checker.feed = lambda records: (fed.append(len(records)), feed(records))[1]
        x = torch.randn(64)
        for g in graphs:
            with cuda_graph(g, streams):
                x.mul(2)
        serve(checker, graphs, 200, lambda step: x.add(step))
        assert len(recorder.trace.records) <= 3    # fed and dropped: at most what came since the last replay
    assert max(fed[-100:]) == min(fed[-100:])     # the same for every served step, however many came before
    assert checker.serving and not rules(checker)


def test_once_it_serves_the_recorder_records_only_what_touches_graph_memory(streams, fake_graph_methods):
    # From the first replay on (the program serves) the recorder stands aside: eager work on
    # other memory is not recorded, a read of a graph's result is, and so is every later capture.
    graph = FakeGraph()
    with recording(streams) as recorder:
        checker = CaptureChecker(recorder, strict=True, on_hazard="warn", whole_process=True)
        static, other = torch.randn(64), torch.randn(64)
        with cuda_graph(graph, streams):
            out = static * 2                               # the graph's result, in its pool
        fed = []
        feed = checker.checker.feed
        checker.checker.feed = lambda records: (fed.extend(records), feed(records))[1]
        serve(checker, [graph], 3, lambda step: static.copy_(other))
        assert checker.serving
        fed.clear()
        other.add(1)                                       # no graph's memory: not recorded
        out.clone()                                        # the graph's result: recorded
        with cuda_graph(FakeGraph(), streams):             # a later capture: recorded
            other.mul(3)
    kernels = [r.kernel.split(".")[1] for r in fed if type(r) is Launch]
    assert "add" not in kernels and "clone" in kernels and "mul" in kernels
    assert torch._C._len_torch_function_stack() == 0       # the watch left with the recording


def test_torch_compile_compiles_under_the_check_and_the_compiled_codes_ops_are_recorded():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()

    def layer(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + 1

    compiled = torch.compile(layer, backend="aot_eager")   # reduce-overhead's front end, without a GPU
    x = torch.randn(4)
    with pytest.warns(NoCaptureWarning), capture_checked() as checked:   # no GPU: no capture, and it says so
        first, second = compiled(x), compiled(x)
    assert counters["frames"]["ok"] == 1                    # compiled, not skipped for the recorder
    assert torch.equal(first, layer(x)) and torch.equal(second, layer(x))
    kernels = [r.kernel.split(".")[1] for r in checked.trace.records if type(r) is Launch]
    assert kernels == ["sin", "mul", "add"] * 2


# -- on a GPU ---------------------------------------------------------------------------------------

class Drifting(torch.nn.Module):
    """A linear layer scaled by a host float that changes every call."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale += 0.25
        return self.linear(x) * self.scale


@pytest.mark.gpu
@pytest.mark.parametrize("drifting", [False, True])
def test_make_graphed_callables_is_checked_through_capture_checked(drifting):
    module = (Drifting() if drifting else torch.nn.Linear(64, 64)).cuda()
    x = torch.randn(8, 64, device="cuda", requires_grad=True)
    with capture_checked(on_hazard="warn") as checked:
        graphed = torch.cuda.make_graphed_callables(module, (x,))
        graphed(x).sum().backward()
    captures = [r for r in checked.trace.records if type(r) is Capture and r.op == "begin"]
    assert len(captures) == 2 and captures[1].pool == "graph0"   # forward and backward, one pool
    assert rules(checked) == ({"frozen_host_value"} if drifting else set())


def test_the_whole_process_check_records_eager_work_from_its_start_and_says_it_saw_no_capture():
    import subprocess
    import sys

    program = ("import torch\n"
               "from gpu_demo.guard.process import check_process\n"
               "checker = check_process()\n"
               "x = torch.randn(4)\n"
               "(x * 2).relu()\n"
               "print([r.kernel.split('.')[1] for r in checker.recorder.trace.records if hasattr(r, 'kernel')])\n")
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          cwd=repo, env={"PYTHONPATH": str(repo), "PATH": ""})
    assert done.returncode == 0 and done.stdout.strip() == "['randn', 'mul', 'relu']", done.stderr
    (line,) = done.stderr.splitlines()   # nothing checked is never an all-clear
    assert line.startswith("capture-order check: no CUDA-graph capture was seen in this process: ")


@pytest.mark.parametrize("whole_process", [False, True], ids=["capture_checked", "whole_process"])
def test_a_cache_made_inside_the_first_capture_and_written_by_the_next_graph_is_a_clobber(
        streams, fake_graph_methods, whole_process):
    # lazy_cache_in_capture on fake graphs (transformers #48199): the cache is made inside graph 0's
    # capture, graph 1 writes its first rows, and graph 0's output is read after both replayed. The
    # whole-process check drops what it was fed: the checker must keep the cache as graph memory.
    # The replays run nothing here; the records are what the H200 gives.
    first, second = FakeGraph(), FakeGraph()
    w = torch.randn(8, 8)
    with recording(streams) as recorder:
        CaptureChecker(recorder, on_hazard="warn", whole_process=whole_process)   # it listens to the recorder
        big, small = torch.randn(4, 8) * 1, torch.randn(2, 8) * 1
        with cuda_graph(first, streams):
            cache = torch.empty(4, 8)
            out_big = torch.matmul(big, w, out=cache[:4])
        with cuda_graph(second, streams):
            torch.matmul(small, w, out=cache[:2])
        with pytest.warns(CaptureHazardWarning, match="graphs_clobber") as caught:
            for _ in range(2):
                torch.cuda.CUDAGraph.replay(first)
                torch.cuda.CUDAGraph.replay(second)
                out_big.clone()
    # the clobbering write was captured long before the replay reports it: its line is still named
    (said,) = [str(w.message) for w in caught if "graphs_clobber" in str(w.message)]
    assert "rule 11 (graphs_clobber) at step" in said and f"{Path(__file__).name}:" in said, said


def test_the_whole_process_check_lets_the_young_generation_grow_and_leaves_a_collector_turned_off_alone():
    import gc

    from gpu_demo.guard import process

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        process._young_generation_for_records()
        assert gc.get_threshold() == (process.GC_YOUNG, 10, 10)
        for already in ((0, 10, 10), (10 * process.GC_YOUNG, 5, 5)):   # turned off, or larger already
            gc.set_threshold(*already)
            process._young_generation_for_records()
            assert gc.get_threshold() == already
    finally:
        gc.set_threshold(*saved)


@pytest.mark.parametrize("captured_writes_it, refreshed", [(False, True), (True, True), (False, False)])
def test_a_graph_reading_what_only_the_warm_up_derived_from_its_input_is_reported_at_its_first_replay(
        streams, fake_graph_methods, captured_writes_it, refreshed):
    # Rule 7 in a whole process: no capture names its static inputs, so the first replay names them,
    # the tensors the graph reads that the program refreshed eagerly since the capture (data_assign_empty:
    # the shared branch skipped in capture leaves the warm-up's product in its static buffer).
    graph = FakeGraph()
    h, out = torch.randn(8), torch.zeros(8)
    expected = {"frozen_state"} if refreshed and not captured_writes_it else set()
    warned = pytest.warns(CaptureHazardWarning, match="frozen_state") if expected else contextlib.nullcontext()
    with capture_checked(on_hazard="warn", device=streams.device()) as checked:
        for _ in range(2):
            torch.mul(h, 2, out=out)        # the warm-up writes out from the input
            h + out
        with cuda_graph(graph, streams):
            if captured_writes_it:
                torch.mul(h, 2, out=out)
            h + out                         # without the write, the graph reads what the warm-up left
        assert rules(checked) == set()      # at the capture's end nobody has said which tensor is the input
        if refreshed:
            h.copy_(torch.randn(8))         # a new input into the captured buffer, as a server does
        with warned:
            torch.cuda.CUDAGraph.replay(graph)
    assert rules(checked) == expected
    if expected:
        (report,) = [r for r in checked.reports if r.findings]
        assert "replay #0 of graph 0" in report.text and "static input" in report.text


def test_the_checker_keeps_the_time_its_checks_took(streams, fake_graph_methods):
    # What the start-up benchmark splits the overhead by: checking against recording.
    graph = FakeGraph()
    with capture_checked(device=streams.device()) as checked:
        x = torch.randn(8)
        assert checked.check_s == 0.0
        with cuda_graph(graph, streams):
            x.mul(2)
        after_capture = checked.check_s
        torch.cuda.CUDAGraph.replay(graph)
        after_replay = checked.check_s
    assert 0.0 < after_capture < after_replay < checked.check_s   # the capture's end, its first replay, the block's


def test_a_capture_still_open_when_the_block_ends_is_checked_at_the_end(streams, fake_graph_methods):
    with capture_checked(on_hazard="warn", device=streams.device()) as checked:
        with streams.on(CAPTURE):
            torch.cuda.CUDAGraph.capture_begin(FakeGraph())   # never ended
            torch.randn(8).mul(2)
    assert checked.check_s > 0.0


def test_a_process_that_records_long_without_capturing_keeps_a_bounded_window(streams, fake_graph_methods,
                                                                             monkeypatch):
    # Eager work with no capture or replay to check at: the recorder hands its records to the checker
    # every RECORDS_CAP, and the checker keeps at most its window of them for a capture to come.
    from gpu_demo.guard.record import ops as recorder_module

    monkeypatch.setattr(recorder_module, "RECORDS_CAP", 50)
    with recording(streams) as recorder:
        checker = CaptureChecker(recorder, strict=True, on_hazard="warn", whole_process=True)
        checker.checker.window = 100
        x = torch.randn(8)
        for _ in range(400):
            x.add(1)
        assert len(recorder.trace.records) <= 50 and checker.checker.kept() <= 100
        for _ in range(2):
            x.mul(2)                       # a warm-up right before the capture: kept for rules 7 to 9
        with cuda_graph(FakeGraph(), streams):
            x.mul(2)
    assert checker.captures == 1 and not rules(checker)
