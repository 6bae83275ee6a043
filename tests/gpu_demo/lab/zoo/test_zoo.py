"""The model zoo on the CPU: every entry's static recording is clean, builds are identical, the runner's output.

Every zoo entry is a correct program, so any finding on it is a false alarm. The
decoders hand the recorder what real models do (an expanded ``position_ids``,
GQA's ``repeat_kv``, broadcast masks): with extents sized as ``numel * itemsize``
rule 6 fired on every one of them. An entry whose library cannot be imported here
is skipped with the reason (timm comes with the ``vision`` extra); in CI (``CI=true``),
where ``make`` installs every extra, it fails instead: the whole zoo is checked there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpu_demo.guard.check import check_capture  # noqa: E402
from gpu_demo.guard.record.capture import record_capture  # noqa: E402
from gpu_demo.lab import zoo  # noqa: E402
from gpu_demo.lab.results import compare  # noqa: E402
from gpu_demo.lab.zoo import runner  # noqa: E402
from simlib.checker import check, format_report  # noqa: E402
from simlib.glossary import NOT_ON_GPU  # noqa: E402

RESULTS_PAGE = Path(__file__).resolve().parents[4] / "docs" / "results.md"
CPU = torch.device("cpu")
_built: dict[str, tuple] = {}


def built(e: zoo.Entry) -> tuple:
    """The entry built once for this module (float32 on the CPU), or a skip saying why it cannot be."""
    why = zoo.unavailable(e)
    if why and os.environ.get("CI") == "true":
        pytest.fail(f"CI checks the whole zoo, but {why}")
    if why:
        pytest.skip(why)
    if e.name not in _built:
        _built[e.name] = zoo.factory(e)(CPU, torch.float32)
    return _built[e.name]


@pytest.mark.parametrize("e", zoo.ENTRIES, ids=zoo.NAMES)
def test_every_zoo_entry_records_clean_on_the_cpu(e):
    fn, inputs = built(e)
    with torch.no_grad():
        trace = record_capture(fn, [t.clone() for t in inputs], replays=0)   # as the guard records
    captured = trace.launches(graph=0)
    assert len(captured) > 20, "the dry-run capture recorded almost nothing"
    findings = check(trace)
    assert findings == [], format_report(findings)


def test_the_guard_passes_a_decode_step_as_a_user_would_check_it():
    e = zoo.entry("llama_decode")
    report = check_capture(e.target, isolate=False)   # bfloat16, the guard's default for a factory
    if torch.cuda.is_available():   # a GPU seat: captured, replayed, and passed
        assert (report.mode, report.problem, report.findings, report.passed) == ("cuda", None, [], True), report.format()
    else:                           # a CPU: nothing found, and nothing replayed: no pass
        assert (report.mode, report.problem, report.findings) == ("dry_run", None, []), report.format()
        assert report.answer == NOT_ON_GPU and not report.passed


@pytest.mark.parametrize("e", zoo.ENTRIES, ids=zoo.NAMES)
def test_two_builds_of_an_entry_are_identical(e):
    fn, inputs = built(e)
    again, again_inputs = zoo.factory(e)(CPU, torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(inputs, again_inputs))
    first, second = fn.state_dict(), again.state_dict()
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    with torch.no_grad():
        assert torch.equal(fn(*inputs), again(*again_inputs))


@pytest.mark.parametrize("name", [n for n in zoo.NAMES if n.endswith(zoo.DECODE)])
def test_a_decode_step_is_the_same_step_however_often_it_runs(name):
    step, (token, position) = built(zoo.entry(name))
    other = (token + 1) % 256
    with torch.no_grad():
        once = step(token, position)
        step(other, position)
        assert torch.equal(step(token, position), once)   # the cache's own counter was pinned each call
        assert not torch.equal(step(other, position), once)


def test_example_token_ids_span_the_vocabulary_so_fresh_ones_do_too():
    from gpu_demo.lab.zoo.decoders import VOCAB

    (ids,) = zoo.factory(zoo.entry("qwen2_forward"))(CPU, torch.float32)[1]
    assert (int(ids.min()), int(ids.max()), ids.dtype) == (0, VOCAB - 1, torch.int64)


def test_an_unknown_entry_is_refused_with_the_list():
    with pytest.raises(ValueError, match="llama_decode"):
        zoo.entry("gpt2_forward")


# -- the runner's output -------------------------------------------------------------------------

def fake_entry(name, truth="correct", verdict="correct", rules=(), first=12.5, warm=3.25, process=None):
    e = zoo.entry(name)
    result = {"name": name, "model": e.model, "mode": e.mode, "library": e.library,
              "truth": {"outcome": truth, "errors": [0.0, 0.001, 0.0]},
              "guard": {"verdict": verdict, "rules": list(rules), "findings": [{"rule": 6}] if rules else [],
                        "problem": None},
              "check_s": {"first": first, "warm": warm}}
    if process is not None:
        result["process"] = process
    return {**result, "clean": runner.clean(result)}


QUIET = {"rules": [], "findings": [], "problem": None, "captures": 1}   # the whole-process check found nothing


def fake_results():
    return {"provenance": {"gpu": "NVIDIA H200", "torch": "2.11.0", "date_utc": "2026-12-01T00:00:00+00:00",
                           "command": "python -m gpu_demo.lab.zoo.runner --out x.json",
                           "libraries": {"timm": "1.0.22", "transformers": "5.17.0"}},
            "replays": 3, "jobs": 4,
            "entries": [fake_entry("llama_decode"),
                        fake_entry("vit_tiny_patch16_224_forward", rules=["rule 6 (extent_exceeds_storage)"])]}


def test_an_entry_is_clean_only_with_no_finding_a_correct_verdict_and_a_correct_truth():
    assert fake_entry("llama_forward")["clean"]
    assert not fake_entry("llama_forward", truth="silent_wrong")["clean"]
    assert not fake_entry("llama_forward", verdict="silent_wrong")["clean"]
    assert not fake_entry("llama_forward", rules=["rule 6 (extent_exceeds_storage)"])["clean"]


def test_an_entry_is_clean_only_when_the_whole_process_check_found_nothing_and_was_not_stopped():
    assert fake_entry("llama_forward", process=QUIET)["clean"]
    flagged = {**QUIET, "rules": ["rule 10 (freed_under_graph)"], "findings": [{"rule": 10}]}
    assert not fake_entry("llama_forward", process=flagged)["clean"]
    assert not fake_entry("llama_forward", process={**QUIET, "problem": "RuntimeError: CUDA error"})["clean"]


def test_the_summary_has_a_whole_process_column_once_every_entry_has_that_check():
    results = fake_results()
    results["entries"] = [fake_entry("llama_decode", process=QUIET),
                          fake_entry("qwen2_forward", process={**QUIET, "rules": ["rule 10 (freed_under_graph)"],
                                                                "findings": [{"rule": 10}]})]
    text = runner.summary(results)
    assert "1 of 2 zoo entries were clean: no finding in either check" in text and "CAPTURE_ORDER_CHECK=1" in text
    assert "| model | mode | GPU truth | guard | whole-process | check s (first / warm) |" in text
    assert "| `llama` | decode | correct [0 0.001 0] | correct, no finding | no finding | 12.5 / 3.2 |" in text
    assert "| correct, no finding | rule 10 (freed_under_graph) | 12.5 / 3.2 |" in text
    assert "whole-process" not in runner.summary(fake_results())   # results from before the column


def test_the_summary_counts_clean_entries_and_shows_truth_guard_and_check_time():
    text = runner.summary(fake_results())
    assert "1 of 2 zoo entries were clean" in text and "timm 1.0.22, transformers 5.17.0" in text
    assert "| `llama` | decode | correct [0 0.001 0] | correct, no finding | 12.5 / 3.2 |" in text
    assert "| `vit_tiny_patch16_224` | forward |" in text and "rule 6 (extent_exceeds_storage)" in text
    assert runner.summary(None) == runner.README_PLACEHOLDER


def test_the_results_page_zoo_block_is_the_summary_of_the_committed_results():
    text = RESULTS_PAGE.read_text()
    start = text.index("<!-- zoo:start (python -m gpu_demo.lab.zoo.runner --summary) -->")
    quoted = text[start:text.index("<!-- zoo:end -->")].split("\n", 1)[1].strip()
    assert quoted == runner.summary(runner.load_results()).strip(), (
        "docs/results.md's zoo block is stale: paste the output of `python -m gpu_demo.lab.zoo.runner --summary`")


def test_the_runner_says_in_one_line_what_it_needs(capsys, tmp_path):
    assert runner.main([]) == 2
    assert "give --out FILE" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert runner.main(["--out", str(tmp_path / "zoo.json")]) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().err
        assert not (tmp_path / "zoo.json").exists()
    assert runner.main(["--summary"]) == 0
    assert capsys.readouterr().out.strip() == runner.summary(runner.load_results()).strip()
    assert runner.main(["--summary", "--only", "llama_decode", "resnet18_forward"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert [row.split(" | ")[:2] for row in rows] == [["| `resnet18`", "forward"], ["| `llama`", "decode"]]
    assert runner.main(["--summary", "--out", str(tmp_path / "zoo.json")]) == 2   # --summary runs nothing
    assert "--summary prints the committed results and runs nothing: leave out --out," in capsys.readouterr().err


def test_run_zoo_joins_each_truth_to_its_check_and_says_when_the_truth_child_died(monkeypatch):
    def check_entry(name, **options):
        done = fake_entry(name)
        return {k: v for k, v in done.items() if k not in ("truth", "clean")}

    monkeypatch.setattr(runner, "check_entry", check_entry)
    monkeypatch.setattr(runner, "time_warm_checks", lambda results, **options: None)
    monkeypatch.setattr(runner, "process_entry", lambda name, **options: {**QUIET, "name": name})
    correct = {"outcome": "correct", "errors": [0.0, 0.0, 0.0]}
    monkeypatch.setattr(runner, "run_in_child", lambda entry, payload, timeout: {
        "truths": {"llama_decode": correct}, "child_error": {"message": "RuntimeError: CUDA error: an illegal memory access"}})
    results = runner.run_zoo(["llama_decode", "qwen2_forward"], jobs=2)
    assert [(r["name"], r["truth"]["outcome"], r["clean"]) for r in results] == [
        ("llama_decode", "correct", True), ("qwen2_forward", None, False)]
    assert results[1]["truth"]["message"] == "RuntimeError: CUDA error: an illegal memory access"
    assert [r["process"]["name"] for r in results] == ["llama_decode", "qwen2_forward"]   # each its own


def test_a_whole_process_child_that_died_is_the_entrys_problem(monkeypatch):
    monkeypatch.setattr("gpu_demo.guard.process.run_in_child", lambda entry, payload, timeout: {
        "child_error": {"message": "the child was killed by SIGKILL"}})
    process = runner.process_entry("llama_decode", dtype="bfloat16", replays=3, seed=0, timeout=5)
    assert process == {"rules": [], "findings": [], "problem": "the child was killed by SIGKILL", "captures": 0}


def test_gpu_demo_zoo_is_the_runner():
    from gpu_demo.lab.cli.main import main

    assert main(["zoo", "--summary"]) == 0 and main(["zoo"]) == 2


def test_the_runner_writes_json_with_provenance(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(zoo, "unavailable", lambda e: None)
    monkeypatch.setattr(runner, "provenance", lambda argv, program: {
        **fake_results()["provenance"], "command": " ".join(["python", "-m", program, *argv])})
    monkeypatch.setattr(runner, "run_zoo", lambda names, **options: [fake_entry(n) for n in names])
    out = tmp_path / "zoo.json"
    assert runner.main(["--out", str(out), "--only", "llama_decode", "qwen2_forward"]) == 0
    written = json.loads(out.read_text())
    assert written["provenance"]["command"] == f"python -m gpu_demo.lab.zoo.runner --out {out} --only llama_decode qwen2_forward"
    assert set(written["provenance"]["libraries"]) == {"timm", "transformers"}
    assert [e["name"] for e in written["entries"]] == ["llama_decode", "qwen2_forward"]
    printed = capsys.readouterr().out
    assert "2 of 2 zoo entries were clean" in printed
    assert printed.splitlines()[-1] == f"beside the committed H200 run, entry by entry: python -m gpu_demo compare {out}"
    assert compare.load(out)[0] == "zoo"   # the file it names is one compare reads


# -- on a GPU --------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_decode_steps_replays_match_a_second_build_and_the_guard_passes_it():
    truth = runner.truth("llama_decode", dtype=torch.bfloat16, replays=3, seed=0)
    assert truth["outcome"] == "correct", truth
    report = check_capture(zoo.entry("llama_decode").target, dtype=torch.bfloat16)
    assert report.passed and report.findings == [], report.format()


@pytest.mark.gpu
def test_the_whole_process_check_finds_nothing_in_a_served_decode_step():
    from gpu_demo.guard.protocol.child import run_in_child

    result = run_in_child("gpu_demo.lab.zoo.runner:process_in_child",
                          {"name": "llama_decode", "dtype": "bfloat16", "replays": 2, "seed": 0}, 300)
    assert "child_error" not in result, result["child_error"]
    assert result["captures"] == 1 and result["findings"] == [] and result["problem"] is None, result


def test_warm_times_come_from_one_worker_primed_by_a_first_check(monkeypatch):
    from types import SimpleNamespace

    from gpu_demo.guard.protocol import worker

    calls = []

    def check_capture(target, **options):
        calls.append((target, len(worker._session)))
        return SimpleNamespace(answer="passed")

    monkeypatch.setattr(runner, "check_capture", check_capture)
    results = [fake_entry("llama_decode"), fake_entry("qwen2_forward")]
    runner.time_warm_checks(results, dtype="bfloat16", replays=1, seed=0, timeout=5.0)
    targets = [zoo.entry(n).target for n in ("llama_decode", "llama_decode", "qwen2_forward")]
    assert calls == [(t, 1) for t in targets]       # all inside one warm_checks() session, the first one priming it
    assert [r["guard_warm"] for r in results] == ["passed", "passed"] and all(r["check_s"]["warm"] >= 0 for r in results)
