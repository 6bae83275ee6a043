"""The guard's verdicts cannot mislead: a reference that disagrees with itself, random ops, and a
graph that differs from eager with nothing found. The decision logic is tested on the CPU with
evidence built by hand and with fake graphs; the real captures run in the GPU tests at the end."""

from __future__ import annotations

import pytest
import torch

from gpu_demo.guard import differential
from gpu_demo.guard.check import GuardReport, _report, check_capture, judge
from gpu_demo.guard.differential import Subject, describe
from gpu_demo.guard.protocol import capture_replay
from gpu_demo.guard.protocol.capture_replay import ReplayEvidence, replay_and_compare
from gpu_demo.guard.protocol.child import ChildError
from gpu_demo.guard.protocol.child_result import ChildResult
from gpu_demo.guard.record.capture import record_capture
from gpu_demo.guard.stochastic import is_random, random_ops, reseed
from gpu_demo.lab.moe.model import MoEStack
from gpu_demo.lab.moe.settings import RunSettings
from simlib.checker import WARNING, Finding
from simlib.programs.spec import MoEConfig

RACE = Finding(3, "cross_stream_race", WARNING, 1, "x", (), "why", "fix")


def wrong(spread=None, errors=(0.4, 0.5)) -> ReplayEvidence:
    return ReplayEvidence(True, "silent_wrong", list(errors), 1e-5, "eager", reference_spread=spread,
                          first_difference={"at": 5, "graph": [3.0, 6.0], "eager": [2.0, 4.0]})


# -- judge: the decision ---------------------------------------------------------------------

def test_a_miss_with_no_finding_is_graph_and_eager_differ_and_a_miss_with_one_stays_silent_wrong():
    assert judge(wrong(spread=0.0), None, []) == ("graph_eager_differ", None)
    assert judge(wrong(spread=0.0), None, [RACE]) == ("silent_wrong", None)


def test_a_reference_that_disagrees_with_itself_cannot_blame_the_capture():
    verdict, problem = judge(wrong(spread=0.09), None, [RACE])
    assert verdict is None and problem.startswith("the reference is nondeterministic")
    assert "0.09" in problem and "0.5" in problem
    assert judge(wrong(spread=1e-7), None, []) == ("graph_eager_differ", None)   # within tolerance: trusted


def test_graph_and_eager_differ_is_no_pass_and_shows_both_sides():
    report = GuardReport("t:f", "cuda", "graph_eager_differ", wrong(spread=0.0))
    assert report.answer == "graph and eager differ" and not report.passed
    first, second = report.format().splitlines()[:2]
    assert first.startswith("t:f: graph and eager differ") and "NOT capture-safe" not in first
    assert "checker found nothing" in second
    assert "first values that differ (from element 5): graph [3, 6, ...], eager [2, 4, ...]" in describe(report.replay)


def test_a_nondeterministic_reference_reads_could_not_check():
    verdict, problem = judge(wrong(spread=0.09), None, [])
    report = GuardReport("t:f", "cuda", verdict, wrong(spread=0.09), problem=problem)
    assert report.answer == "could not check" and report.format().startswith("t:f: could not check")


# -- random ops ------------------------------------------------------------------------------

def dropout_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).train()


def test_random_ops_are_recognised_in_the_recording():
    trace = record_capture(dropout_mlp(), [torch.randn(2, 8)], replays=0)
    assert random_ops(trace) == ["aten.bernoulli_.float"]
    assert random_ops(record_capture(torch.nn.Linear(8, 8), [torch.randn(2, 8)], replays=0)) == []
    assert is_random("aten.randn_like.default") and is_random("aten.native_dropout.default")
    assert not is_random("aten.randperm_backward") and not is_random("aten.addmm.default")


@pytest.fixture
def rerun_capture(monkeypatch):
    """``capture_replay.capture`` returns a fake graph whose replay reruns the function, drawing
    from the generator's state at replay time, as a graph's philox kernels do."""
    monkeypatch.setattr(capture_replay, "warm_up", lambda fn: fn())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    class Graph:
        def __init__(self, fn, out):
            self.replay = lambda: out.copy_(fn())

    def capture(fn, mode="global"):
        out = fn()
        return Graph(fn, out), out
    monkeypatch.setattr(capture_replay, "capture", capture)


@pytest.mark.parametrize("reseeded, outcome", [(True, "correct"), (False, "silent_wrong")])
def test_dropout_replays_match_only_a_reference_that_drew_the_same_numbers(rerun_capture, reseeded, outcome):
    layer = dropout_mlp()
    static = [torch.randn(4, 8)]
    fresh = [[torch.randn(4, 8)] for _ in range(3)]
    wanted = []
    for inputs in fresh:
        reseed(7)
        wanted.append(layer(inputs[0].clone()).detach())
    evidence = replay_and_compare(lambda x: layer(x).detach(), static, fresh, lambda i: wanted[i], "eager",
                                  before_replay=(lambda i: reseed(7)) if reseeded else None)
    assert evidence.outcome == outcome


def unseeded_factory() -> torch.nn.Module:
    """Weights from a generator seeded by the clock: two builds under one seed still differ."""
    generator = torch.Generator()
    generator.seed()
    layer = torch.nn.Linear(8, 8)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(8, 8, generator=generator))
    return layer


def seeded_factory() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).train()


@pytest.mark.parametrize("factory, differs", [(unseeded_factory, True), (seeded_factory, False)])
def test_the_reference_runs_twice_before_it_is_trusted(monkeypatch, factory, differs):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    subject = Subject(target=factory, name="f", inputs=(torch.randn(2, 8),), dtype=torch.float32, replays=2)
    wanted, fresh, how, spread = differential._references(subject, [torch.randn(2, 8)], torch.device("cpu"))
    assert len(wanted) == len(fresh) == 2 and "separate build" in how
    assert (spread > 1e-3) is differs and (spread == 0.0) is (not differs)


# -- on a GPU ----------------------------------------------------------------------------------

def dropout_factory(device: torch.device, dtype: torch.dtype):
    layer = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.3), torch.nn.Linear(64, 64),
                                torch.nn.Dropout(0.3)).to(device, dtype).train()
    return layer, (torch.randn(16, 64, device=device, dtype=dtype),)


def unseeded_gpu_factory(device: torch.device, dtype: torch.dtype):
    layer = unseeded_factory().to(device, dtype)
    return layer, (torch.randn(4, 8, device=device, dtype=dtype),)


def captured_path_differs(x: torch.Tensor) -> torch.Tensor:
    """Deliberately computes something else while capturing (a correct graph of another program)."""
    if torch.cuda.is_current_stream_capturing():
        return x.neg()
    return x.abs()


@pytest.mark.gpu
def test_dropout_in_train_mode_inside_a_capture_is_not_called_wrong():
    report = check_capture_here(dropout_factory)
    # Different dropout masks would miss by about 0.5; the fp32 tolerance is 1e-5.
    assert report.verdict == "correct" and report.passed, report.format()
    assert any("dropout" in op or "bernoulli" in op for op in report.replay.stochastic), report.replay.stochastic


@pytest.mark.gpu
def test_on_a_gpu_a_reference_that_disagrees_with_itself_could_not_check():
    report = check_capture_here(unseeded_gpu_factory)
    assert report.answer == "could not check" and "nondeterministic" in report.problem, report.format()


@pytest.mark.gpu
def test_on_a_gpu_a_graph_that_differs_from_eager_with_no_finding_says_so():
    report = check_capture_here(captured_path_differs, torch.randn(8, 8))
    assert report.verdict == "graph_eager_differ" and not report.findings, report.format()
    diff = report.replay.first_difference
    assert diff["graph"][0] != diff["eager"][0] and "first values that differ" in " ".join(report.format().split())


def check_capture_here(fn, *inputs):
    return check_capture(fn, *inputs, dtype=torch.float32)


# -- one child: the recording survives a replay that kills the process ------------------------

def incident() -> MoEStack:
    """The incident's order on the CPU: the dry run sees the dispose before a late launch."""
    return MoEStack(MoEConfig(tokens=4, hidden=32, intermediate=64, experts=4, order="routed_first"),
                    RunSettings(device="cpu", dtype="float32"))


@pytest.mark.parametrize("hazard, answer", [(True, "NOT capture-safe"), (False, "could not check")])
def test_a_child_that_dies_in_the_replay_still_reports_what_the_recording_showed(hazard, answer):
    trace = record_capture(incident() if hazard else torch.neg, [torch.randn(4, 32)], replays=0)
    died = ChildResult(mode="cuda", trace=trace.to_json(), child_error=ChildError("Fatal Python error: Segmentation fault"))
    report = _report("t:f", died, strict=False)
    assert report.answer == answer and report.replay.reason.startswith("the replay did not finish")
    assert ("host_mutation" in report.codes) is hazard


def test_the_values_shown_start_where_graph_and_eager_differ_not_at_the_leading_values_that_agree():
    import torch

    from gpu_demo.guard.protocol.capture_replay import first_values
    want = torch.arange(10.0)
    got = want.clone()
    got[6] = -1.0
    diff = first_values(got, want, tolerance=1e-5, count=2)
    assert diff == {"at": 6, "graph": [-1.0, 7.0], "eager": [6.0, 7.0]}
