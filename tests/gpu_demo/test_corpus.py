"""The corpus: its programs on the CPU, the runner's output, and the committed GPU results.

The GPU results test reads ``gpu_demo/results/corpus-h200.json`` when it is
committed (``python -m gpu_demo corpus`` on a GPU writes it): every program is
in it, every hazardous program was flagged by a checker rule, by the
differential replay, or by a capture error the guard named (a crash alone does
not count; see ``gpu_demo.corpus.runner``), and every safe program came out
clean and correct.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
from pathlib import Path

import pytest
import torch

from gpu_demo import corpus
from gpu_demo.cli import check as check_commands
from gpu_demo.cli.main import main
from gpu_demo.corpus import runner
from gpu_demo.measure.overhead import compare

README = Path(__file__).resolve().parents[2] / "README.md"
PROGRAMS = corpus.PROGRAMS


def source(name: str) -> str:
    return inspect.getsource(corpus.load(name))


def code(name: str) -> str:
    """The program's source after its docstring."""
    text = source(name)
    return text[text.index('"""', 3) + 3:]


# -- the programs ------------------------------------------------------------------------

def test_the_corpus_has_at_least_14_programs_of_both_classes():
    expected = [corpus.load(name).EXPECTED for name in PROGRAMS]
    assert len(PROGRAMS) >= 14
    assert set(expected) == {corpus.HAZARDOUS, corpus.SAFE}


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_imports_nothing_from_this_project_and_says_why_it_is_what_it_is(name):
    tree = ast.parse(source(name))
    imported = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))
    assert imported <= {"torch", "triton", "functools"}, imported
    program = corpus.load(name)
    assert program.EXPECTED in (corpus.HAZARDOUS, corpus.SAFE)
    assert ("\nHazardous" if program.EXPECTED == corpus.HAZARDOUS else "\nSafe") in program.__doc__


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_builds_on_the_cpu_and_runs_eagerly_where_it_can(name):
    program = corpus.load(name)
    fn, inputs = program.make(torch.device("cpu"), torch.float32)
    assert callable(fn) and inputs and all(isinstance(t, torch.Tensor) for t in inputs)
    if getattr(program, "RUNS_ON_CPU", True):
        with torch.no_grad():
            out = fn(*(t.clone() for t in inputs))
        assert out.shape == inputs[0].shape and torch.isfinite(out).all()
    else:
        with pytest.raises(RuntimeError, match="needs triton and a CUDA device"):
            fn(*inputs)


@pytest.mark.parametrize("construct, expected", [
    ("x.set_(torch.empty((0,)", corpus.HAZARDOUS),           # disposal to an empty tensor
    ("x.set_(torch.empty([]", corpus.HAZARDOUS),             # to a 0-dim tensor
    ("untyped_storage().resize_(0)", corpus.HAZARDOUS),     # by freeing the storage
    ("if x.shape[0] == 0:", corpus.HAZARDOUS),              # a Python shape guard
    ("@triton.jit", corpus.HAZARDOUS),                      # a raw Triton kernel
    ("torch.cuda.is_current_stream_capturing()):", corpus.SAFE),  # fix: skip dispose in capture
    ("permuted.set_(", corpus.SAFE),                        # fix: dispose only the owned buffer
    ("shared_in = x.clone()", corpus.SAFE),                 # fix: clone for the other branch
    (".item()", corpus.HAZARDOUS),
    ("torch.cuda.synchronize()", corpus.HAZARDOUS),
])
def test_every_required_category_is_covered(construct, expected):
    assert any(construct in code(n) and corpus.load(n).EXPECTED == expected for n in PROGRAMS), construct


def test_both_issue_orders_a_race_a_missing_fork_and_join_and_the_safe_layers_are_there():
    for name in ("routed_first_set_empty_shape_guard", "shared_first_set_empty_shape_guard",
                 "race_read_before_join", "missing_fork", "missing_join", "fix_never_dispose",
                 "safe_single_stream", "safe_dual_stream"):
        assert name in PROGRAMS
    shared_first = source("shared_first_set_empty_shape_guard")
    assert shared_first.index("shared = self.shared(x)") < shared_first.index("routed = self.routed(x)\n            main")
    assert ".set_(" not in code("race_read_before_join") and "resize_" not in code("race_read_before_join")
    assert "wait_stream(main)" not in code("missing_fork") and "wait_stream(self.alt)" not in code("missing_join")


def test_an_unknown_program_is_refused_with_the_list():
    with pytest.raises(ValueError, match="safe_dual_stream"):
        corpus.load("nope")


# -- the runner's judgement, table and JSON ----------------------------------------------------

def fake_guard(verdict, rules=(), findings=None):
    return {"verdict": verdict, "rules": list(rules), "codes": [], "findings": findings or [], "passed": False}


def fake_result(name, expected, truth, guard):
    return {"name": name, "expected": expected, "about": "x", "truth": {"outcome": truth, "errors": [0.5, 0.5]},
            "guard": guard, "flagged_by": runner.flagged_by(guard)}


@pytest.mark.parametrize("guard, flagged", [
    (fake_guard("unordered", ["rule 4 (reuse_after_free)"]), ["rule 4 (reuse_after_free)"]),
    (fake_guard("silent_wrong"), ["replay: silent_wrong"]),
    (fake_guard("capture_error:cudaErrorStreamCaptureUnjoined"), ["capture_error:cudaErrorStreamCaptureUnjoined"]),
    (fake_guard("capture_error:shape_mismatch"), ["capture_error:shape_mismatch"]),
    (fake_guard("capture_error:RuntimeError"), []),   # unclassified: a crash, not a diagnosis
    (fake_guard(None), []),
    (fake_guard("correct"), []),
])
def test_what_counts_as_flagged(guard, flagged):
    assert runner.flagged_by(guard) == flagged


def test_a_safe_program_is_right_only_when_clean_and_correct_on_the_gpu():
    assert runner.judged(fake_result("a", "safe", "correct", fake_guard("correct")))
    assert not runner.judged(fake_result("a", "safe", "silent_wrong", fake_guard("correct")))
    assert not runner.judged(fake_result("a", "safe", "correct", fake_guard("unordered", findings=[{"rule": 4}])))
    assert not runner.judged(fake_result("a", "hazardous", "correct", fake_guard("correct")))


def fake_results():
    return [
        fake_result("routed_first_set_empty_shape_guard", "hazardous", "silent_wrong",
                    fake_guard("silent_wrong", ["rule 1 (host_mutation)"])),
        fake_result("missing_join", "hazardous", "capture_error:cudaErrorStreamCaptureUnjoined",
                    fake_guard("capture_error:cudaErrorStreamCaptureUnjoined")),
        fake_result("safe_dual_stream", "safe", "correct", fake_guard("correct")),
    ]


def test_the_corpus_command_prints_the_table_and_writes_json_with_provenance(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(check_commands, "no_cuda", lambda command, hint="": False)
    monkeypatch.setattr(runner, "run_corpus", lambda names, **options: fake_results())
    out = tmp_path / "corpus.json"
    assert main(["corpus", "--out", str(out), "--jobs", "2"]) == 0
    table = capsys.readouterr().out
    assert "silent_wrong [0.5 0.5]" in table and "rule 1 (host_mutation)" in table
    assert table.count(" yes") == 3
    written = json.loads(out.read_text())
    assert written["provenance"]["command"] == f"python -m gpu_demo corpus --out {out} --jobs 2"
    assert [p["name"] for p in written["programs"]] == [r["name"] for r in fake_results()]


def test_the_corpus_command_refuses_unknown_programs_and_a_machine_without_cuda(capsys):
    assert main(["corpus", "--only", "nope"]) == 2
    assert "unknown program(s) nope" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["corpus"]) == 2 and main(["recorder-overhead"]) == 2


def test_the_readme_summary_counts_what_the_guard_flagged():
    results = {"provenance": {"gpu": "NVIDIA H200", "torch": "2.11.0", "date_utc": "2026-12-01T00:00:00+00:00",
                              "command": "python -m gpu_demo corpus"}, "replays": 3, "programs": fake_results()}
    text = runner.summary(results)
    assert "flagged 2 of 2 hazardous programs (1 by a checker rule) and passed 1 of 1 safe" in text
    assert "| `missing_join` | hazardous | capture fails: cudaErrorStreamCaptureUnjoined |" in text
    assert runner.summary(None) == runner.README_PLACEHOLDER


def test_the_readme_corpus_block_is_current():
    text = README.read_text()
    start = text.index("<!-- corpus:start (python -m gpu_demo corpus --summary) -->")
    quoted = text[start:text.index("<!-- corpus:end -->")].split("\n", 1)[1].strip()
    assert quoted == runner.summary(runner.load_results()).strip(), (
        "README's corpus block is stale: paste the output of `python -m gpu_demo corpus --summary`")


# -- the committed GPU results (when there are any) --------------------------------------------

committed = runner.load_results()
needs_results = pytest.mark.skipif(committed is None, reason="no committed corpus results (run the corpus on a GPU)")


@needs_results
def test_the_committed_results_cover_every_program_with_provenance():
    assert sorted(p["name"] for p in committed["programs"]) == sorted(PROGRAMS)
    assert committed["provenance"]["gpu"] and committed["provenance"]["command"].startswith("python -m gpu_demo corpus")


@needs_results
@pytest.mark.parametrize("name", [n for n in PROGRAMS if corpus.load(n).EXPECTED == corpus.HAZARDOUS])
def test_every_hazardous_program_was_flagged_on_the_gpu(name):
    (result,) = [p for p in committed["programs"] if p["name"] == name]
    assert runner.flagged_by(result["guard"]), f"{name}: the guard said {result['guard']['verdict']} and no rule fired"


@needs_results
@pytest.mark.parametrize("name", [n for n in PROGRAMS if corpus.load(n).EXPECTED == corpus.SAFE])
def test_every_safe_program_was_clean_and_correct_on_the_gpu(name):
    (result,) = [p for p in committed["programs"] if p["name"] == name]
    assert result["guard"]["findings"] == [], result["guard"]["rules"]
    assert result["guard"]["verdict"] == "correct" and result["truth"]["outcome"] == "correct"


# -- the recorder-overhead comparison ------------------------------------------------------------

def test_the_overhead_ratio_is_record_plus_check_over_plain_by_medians():
    plain_times = iter([9.0, 1.0, 1.2, 0.8])            # the first, untimed pass is dropped
    recorded_times = iter([(9.0, 9.0), (2.0, 0.5), (1.5, 0.5), (2.5, 0.5)])

    def recorded():
        record, check = next(recorded_times)
        return record, check, {"records": 10, "findings": 1}

    result = compare(lambda: next(plain_times), recorded, repeats=3, settle=lambda: None)
    assert result["plain_s"]["median"] == 1.0 and result["record_and_check_s"]["median"] == 2.5
    assert result["ratio"] == 2.5 and result["within_target"] and result["records"] == 10


def _recorded_at(record: float, check: float):
    def recorded():
        return record, check, {"records": 10, "findings": 0}
    return recorded


def test_the_ratio_pairs_each_recorded_pass_with_the_untraced_plain_pass_beside_it():
    untraced = iter([1.0, 0.8, 0.8, 1.28])              # a slow spell in the last repeat hits all
    plain = iter([1.0, 1.0, 1.0, 1.6])
    recorded = iter([(2.0, 0.5), (1.5, 0.5), (1.5, 0.5), (2.4, 0.8)])

    def record():
        r, c = next(recorded)
        return r, c, {"records": 10, "findings": 0}

    result = compare(lambda: next(plain), record, repeats=3, untraced=lambda: next(untraced),
                     settle=lambda: None)
    assert result["ratio"] == 2.5 and result["within_target"]      # 2.5, 2.5, 2.5 paired
    assert result["ratio_same_process"] == 2.0                     # 2.0, 2.0, 2.0 paired
    assert result["plain_untraced_s"]["median"] == 0.8 and result["plain_s"]["median"] == 1.0
    assert result["record_and_check_s"]["median"] == 2.0


def test_without_an_untraced_baseline_the_ratio_is_against_the_plain_passes():
    result = compare(lambda: 1.0, _recorded_at(3.0, 0.5), repeats=3, settle=lambda: None)
    assert result["ratio"] == 3.5 and not result["within_target"]
    assert "ratio_same_process" not in result and "plain_untraced_s" not in result


def test_every_timed_pass_starts_from_a_settled_heap():
    events = []

    def timed(name, seconds):
        def run():
            events.append(name)
            return seconds
        return run

    def recorded():
        events.append("recorded")
        return 2.0, 0.5, {"records": 10, "findings": 0}

    compare(timed("plain", 1.0), recorded, repeats=2, floor=timed("floor", 1.1),
            untraced=timed("untraced", 0.9), settle=lambda: events.append("settle"))
    timed_passes = events[4:]                  # after the untimed first pass of each
    # the untraced pass (settled in its own process) right before the recorded pass it pairs with
    assert timed_passes == ["settle", "plain", "settle", "floor", "settle", "untraced", "recorded"] * 2


def test_the_overhead_table_shows_the_plain_passes_its_ratio_pairs_with(monkeypatch, tmp_path, capsys):
    from gpu_demo.measure import overhead

    stack = {"ops": 10, "records": 20, "plain_s": {"median": 0.7}, "plain_untraced_s": {"median": 0.5},
             "record_s": {"median": 1.4}, "check_s": {"median": 0.1}, "ratio": 3.0, "within_target": False,
             "floor_us_per_op": 1.0, "record_us_per_op": 2.0}
    monkeypatch.setattr(check_commands, "no_cuda", lambda command, hint="": False)
    monkeypatch.setattr(overhead, "run_overhead", lambda layers, repeats: {"layers": layers, "moe_stack": stack})
    assert main(["recorder-overhead", "--out", str(tmp_path / "o.json")]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("moe_stack")]
    assert "0.500" in row and "0.700" not in row and "3.00" in row   # the untraced plain passes


def test_an_untraced_process_that_cannot_build_its_stack_says_why():
    from gpu_demo.measure.untraced import UntracedPasses
    from gpu_demo.moe.settings import RunSettings

    with pytest.raises(RuntimeError, match="untraced plain passes' process ended") as caught:
        UntracedPasses("no_such_stack", 1, RunSettings(dtype="float32", device="cpu"))
    assert "KeyError: 'no_such_stack'" in str(caught.value)


@pytest.mark.gpu
def test_untraced_plain_passes_are_timed_in_a_process_that_never_records():
    from gpu_demo.measure.untraced import UntracedPasses
    from gpu_demo.moe.settings import RunSettings

    with UntracedPasses("plain_pytorch_stack", 2, RunSettings()) as untraced:
        times = [untraced() for _ in range(3)]
        child = untraced._child
    assert all(0 < t < 10 for t in times) and child.poll() == 0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_the_overhead_runs_on_one_core_and_gives_the_others_back():
    from gpu_demo.measure.overhead import _on_core

    allowed = os.sched_getaffinity(0)
    core = min(allowed)
    with _on_core(core):
        inside = os.sched_getaffinity(0)
    assert inside == {core} and os.sched_getaffinity(0) == allowed
