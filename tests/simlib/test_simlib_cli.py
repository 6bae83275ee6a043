"""``python -m simlib``: exit codes, reports, options that mirror MoEConfig, clear input errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simlib.__main__ import main
from simlib.glossary import CORRECT, ILLEGAL_ADDRESS, UNORDERED, words
from simlib.programs import scenarios
from simlib.programs.spec import CAPTURE_FAULTS, DISPOSE_POLICIES, INPUT_MODES, ORDERS, ROUTED_STREAMS, SHARED_MODES, MoEConfig


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def findings_json(capsys, *argv: str) -> dict:
    code, out, _ = cli(capsys, "check", "--json", *argv)
    data = json.loads(out)
    data["exit"] = code
    return data


# --------------------------------------------------------------------------- check
def test_routed_first_reports_the_seed_bug_and_fails(capsys):
    code, out, _ = cli(capsys, "check", "--scenario", "moe", "--order", "routed_first")
    assert code == 1
    assert "ERROR rule 1 (host_mutation)" in out and "ERROR rule 2 (empty_argument)" in out
    assert "pointers: 0x7e" in out and ", 0x0" in out
    assert out.splitlines()[0].endswith("simulated outcome: silently wrong")    # glossary words


def test_shared_first_passes_with_its_warning_unless_strict(capsys):
    code, out, _ = cli(capsys, "check", "--scenario", "moe", "--order", "shared_first",
                       "--shared-mode", "plain")
    assert code == 0 and "WARNING rule 4 (reuse_after_free)" in out and "0 errors, 1 warning." in out
    code, _, _ = cli(capsys, "check", "--order", "shared_first", "--shared-mode", "plain", "--strict")
    assert code == 1


def test_a_fix_is_clean(capsys):
    code, out, _ = cli(capsys, "check", "--dispose", "skip_in_capture", "--strict")
    assert code == 0 and "No capture hazards found." in out


def test_a_failed_capture_is_said_clearly_and_first_and_fails(capsys):
    code, out, _ = cli(capsys, "check", "--order", "routed_first", "--shared-mode", "plain")
    assert code == 1
    first, second = out.splitlines()[:2]
    assert first.endswith("simulated outcome: a capture error (shape_mismatch), so there is no graph")
    assert second.startswith("CAPTURE FAILED: shape_mismatch") and "'x' has shape [0]" in second
    assert "replays were" not in out and "No capture hazards found" not in out
    assert "ERROR rule 0 (capture_failed)" in out and out.rstrip().endswith("1 error, 0 warnings.")


def test_a_failed_capture_in_a_saved_trace_is_reported_before_anything_else(capsys, tmp_path):
    path = tmp_path / "failed.json"
    path.write_text(scenarios.run(MoEConfig(order="shared_first", capture_fault="unjoined")).trace.to_json())
    code, out, _ = cli(capsys, "check", "--trace", str(path), "--strict")
    lines = out.splitlines()
    assert code == 1 and lines[1] == "CAPTURE FAILED: capture of graph 0 ended with cudaErrorStreamCaptureUnjoined"
    assert lines[3].startswith("ERROR rule 0 (capture_failed)") and "rule 3" not in out and "rule 4" not in out


def test_json_findings(capsys):
    data = findings_json(capsys, "--shared-mode", "raw_kernel")
    assert data["exit"] == 1 and data["outcome"] == "illegal_address"
    assert [(f["rule"], f["severity"]) for f in data["findings"]] == [(1, "error"), (2, "error")]
    assert data["findings"][0]["pointers"][1] == "0x0"


def test_scenario_options_mirror_moe_config(capsys):
    data = findings_json(capsys, "--order", "shared_first", "--shared-mode", "raw_kernel",
                         "--dispose", "never", "--clone", "--inputs", "same_as_eager",
                         "--capture-fault", "none", "--layers", "2", "--tokens", "8",
                         "--routed-stream", "alt", "--pdl")
    assert data["config"] == MoEConfig(order="shared_first", shared_mode="raw_kernel", dispose="never",
                                       clone=True, inputs="same_as_eager", layers=2, tokens=8,
                                       routed_stream="alt", pdl=True).to_dict()
    assert findings_json(capsys)["config"] == MoEConfig().to_dict()      # defaults are MoEConfig's


def test_choices_come_from_the_spec(capsys):
    code, out, _ = cli(capsys, "check", "--help")
    assert code == 0
    for values in (ORDERS, SHARED_MODES, DISPOSE_POLICIES, INPUT_MODES, CAPTURE_FAULTS, ROUTED_STREAMS):
        assert "{" + ",".join(values) + "}" in out.replace("\n", "").replace(" ", "")


def test_a_saved_trace_is_checked_like_the_scenario(capsys, tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(scenarios.run(MoEConfig(order="shared_first", inputs="stale")).trace.to_json())
    saved = findings_json(capsys, "--trace", str(path))
    simulated = findings_json(capsys, "--order", "shared_first", "--inputs", "stale")
    assert saved["findings"] == simulated["findings"] and saved["exit"] == simulated["exit"] == 1
    assert saved["config"] is None and saved["source"] == f"trace {path}"


# --------------------------------------------------------------------------- export, headline
def test_export_writes_a_chrome_trace(capsys, tmp_path):
    out = tmp_path / "trace.json"
    code, printed, _ = cli(capsys, "export", "--scenario", "moe", "--order", "routed_first", "--out", str(out))
    assert code == 0 and str(out) in printed
    events = json.loads(out.read_text())["traceEvents"]
    assert any(e["ph"] == "i" and e["name"] == "set_ x" for e in events)


def test_export_reads_a_saved_trace(capsys, tmp_path):
    saved = tmp_path / "simlib.json"
    saved.write_text(scenarios.run(MoEConfig(order="shared_first")).trace.to_json())
    code, _, _ = cli(capsys, "export", "--trace", str(saved), "--out", str(tmp_path / "a.json"))
    assert code == 0
    cli(capsys, "export", "--order", "shared_first", "--out", str(tmp_path / "b.json"))
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


@pytest.mark.parametrize("command", [[], ["check"], ["export"], ["headline"]])
def test_help_everywhere(capsys, command):
    code, out, _ = cli(capsys, *command, "--help")
    assert code == 0 and out.startswith("usage: python -m simlib")


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("argv, message", [
    ([], "required: COMMAND"),
    (["check", "--order", "sideways"], "invalid choice: 'sideways'"),
    (["check", "--layers", "0"], "layers must be a positive integer"),
    (["check", "--layers", "62"], "use 1 to 61"),
    (["check", "--tokens", "many"], "invalid int value: 'many'"),
    (["check", "--trace", "t.json", "--order", "routed_first"], "--order cannot apply"),
    (["check", "--trace", "t.json", "--scenario", "moe"], "--scenario cannot apply"),
    (["check", "--trace", "does/not/exist.json"], "cannot read --trace"),
    (["export", "--order", "routed_first"], "required: --out"),
    (["export", "--out", "no/such/dir/trace.json"], "cannot write --out"),
    (["headline"], "required: --out"),
])
def test_bad_input_is_a_usage_error(capsys, argv, message):
    code, out, err = cli(capsys, *argv)
    assert code == 2 and message in err and "usage:" in err and "Traceback" not in err


@pytest.mark.parametrize("content, message", [
    ("not json", "is not a simlib trace"),
    ('{"version": 99, "records": []}', "version 99 is not supported"),
    ('{"version": 1, "records": [{"kind": "warp"}]}', "unknown trace record kind 'warp'"),
    ('{"version": 1, "records": [{"kind": "launch", "step": 0}]}', "malformed 'launch' record"),
    ("[1, 2]", "is a JSON list, not a simlib trace"),
    ('{"traceEvents": [], "displayTimeUnit": "ns"}', "is a Chrome/Perfetto trace, not a simlib trace"),
    ("3", "holds a JSON int, not a simlib trace"),
])
def test_a_bad_trace_file_is_a_usage_error(capsys, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, _, err = cli(capsys, "check", "--trace", str(path))
    assert code == 2 and message in err


def test_an_exported_chrome_trace_given_to_check_says_what_it_is(capsys, tmp_path):
    exported = tmp_path / "perfetto.json"
    assert cli(capsys, "export", "--out", str(exported))[0] == 0
    code, _, err = cli(capsys, "check", "--trace", str(exported))
    assert code == 2 and "is a Chrome/Perfetto trace, not a simlib trace" in err
    assert "Give --trace the simlib trace itself" in err and "Traceback" not in err


def test_a_reader_that_stops_early_gets_no_traceback():
    root = Path(__file__).resolve().parents[2]
    run = subprocess.Popen([sys.executable, "-m", "simlib", "check", "--layers", "61"], cwd=root,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert run.stdout is not None and run.stderr is not None
    assert run.stdout.readline().startswith(b"scenario moe")     # like `| head -1`: then close
    run.stdout.close()
    err = run.stderr.read().decode()
    assert run.wait() == 1 and err == ""                          # no BrokenPipeError traceback


def test_subprocess_smoke(tmp_path):
    root = Path(__file__).resolve().parents[2]
    run = [sys.executable, "-m", "simlib", "check", "--order"]
    bug = subprocess.run([*run, "routed_first"], capture_output=True, text=True, cwd=root)
    assert bug.returncode == 1 and "ERROR rule 1" in bug.stdout
    bad = subprocess.run([*run, "nope"], capture_output=True, text=True, cwd=root)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "Traceback" not in bad.stderr


def test_check_of_the_reorder_fix_gives_the_verdict_unordered_and_exits_0(capsys):
    assert main(["check", "--scenario", "moe", "--order", "shared_first"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("simulated outcome: unordered (its replays: correct, but the graph leaves a race; "
                          "see below)")


def test_json_of_the_reorder_fix_carries_the_verdict_in_the_texts_word(capsys):
    data = findings_json(capsys, "--order", "shared_first")
    assert (data["exit"], data["outcome"], data["verdict"]) == (0, CORRECT, UNORDERED)
    assert data["source"].split("simulated outcome: ")[1].startswith(words(data["verdict"]))
    assert findings_json(capsys, "--shared-mode", "raw_kernel")["verdict"] == ILLEGAL_ADDRESS


def test_headline_that_cannot_write_its_folder_exits_2_without_a_traceback(tmp_path):
    (tmp_path / "file.txt").write_text("")
    done = subprocess.run([sys.executable, "-m", "simlib", "headline", "--out", str(tmp_path / "file.txt" / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "cannot write --out" in done.stderr
    assert "Traceback" not in done.stderr
