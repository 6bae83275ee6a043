"""``python -m gpu_demo``'s command line: help that says every default, clean failures."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpu_demo.lab.cli.main import _config, build_parser, main  # noqa: E402
from simlib.programs.spec import MoEConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def help_texts() -> dict[str, str]:
    parser = build_parser()
    return {"": parser.format_help(),
            **{name: sub.format_help() for name, sub in subparsers(parser).items()}}


@pytest.mark.parametrize("command", sorted(subparsers(build_parser())))
def test_every_option_says_what_it_does_and_its_default(command):
    sub = subparsers(build_parser())[command]
    formatter = sub._get_formatter()
    for action in sub._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{command} {action.option_strings} has no help"
            assert "default" in formatter._get_help_string(action), \
                f"{command} {action.option_strings}: the help does not say the default"


def test_help_is_plain_text_without_restructuredtext_markup():
    for command, text in help_texts().items():
        assert "`" not in text, f"backticks in the help of {command or 'gpu_demo'}"


def test_the_internal_case_command_is_not_offered(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bogus"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err and "case" not in err
    assert "case" not in help_texts()[""]


@pytest.mark.parametrize("flags, clone, pdl", [
    ([], False, False), (["--clone", "--pdl"], True, True), (["--clone", "--no-clone", "--no-pdl"], False, False),
])
def test_clone_and_pdl_are_on_off_switches_as_in_simlib(flags, clone, pdl):
    config = _config(build_parser().parse_args(["record", "--dry-run", *flags]))
    assert config == MoEConfig(clone=clone, pdl=pdl)


@pytest.mark.parametrize("where, why", [("a directory", "it is a directory"),
                                        ("under a file", "is not a directory")])
def test_an_unwritable_trace_out_is_one_line_and_exit_2(tmp_path, capsys, where, why):
    (tmp_path / "file.txt").write_text("")
    target = tmp_path if where == "a directory" else tmp_path / "file.txt" / "trace.json"
    assert main(["record", "--dry-run", "--trace-out", str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"gpu_demo record: cannot write --trace-out {target}: ") and why in line


def test_a_trace_out_in_a_missing_folder_is_one_line_and_exit_2_and_no_folder_is_made(tmp_path, capsys):
    target = tmp_path / "new" / "trace.json"
    assert main(["record", "--dry-run", "--dispose", "skip_in_capture", "--trace-out", str(target)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"gpu_demo record: cannot write --trace-out {target}: "
                    f"its folder {target.parent} does not exist (create it first)")
    assert not target.parent.exists()


def test_a_closed_pipe_ends_the_output_quietly():
    # As `python -m gpu_demo record ... | head -0`: the reader is gone before the first line.
    # (A clean capture: it would exit 0 with its reader there.)
    child = subprocess.Popen([sys.executable, "-m", "gpu_demo", "record", "--dry-run", "--dispose",
                              "skip_in_capture"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=300) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_a_long_run_shows_a_few_errors_and_how_many_replays_were_wrong():
    from gpu_demo.lab.cli.main import _errors_cell

    assert _errors_cell([0.0, 0.0, 0.0], 1e-2) == "0 0 0"
    assert _errors_cell([0.0] * 150 + [0.5, float("nan")] + [None], 1e-2) == "0 0 0 0 ... (3 of 153 wrong)"


# -- issue 25: a newcomer's pass over the command line -------------------------------------

def test_a_bad_value_is_reported_under_the_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--layers", "0"])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("usage: python -m gpu_demo run ")
    assert lines[-1] == "python -m gpu_demo run: error: layers must be a positive integer, got 0"


@pytest.mark.parametrize("command", sorted(subparsers(build_parser())))
def test_every_subcommand_help_page_has_a_description(command):
    sub = subparsers(build_parser())[command]
    assert sub.description and sub.description[0].isupper(), f"{command} has no description"
    assert " ".join(sub.description.split()) in " ".join(sub.format_help().split())


def options(command: str) -> set[str]:
    sub = subparsers(build_parser())[command]
    return {s for a in sub._actions for s in a.option_strings}


def test_bench_offers_only_the_sizes_of_the_program_it_times():
    # Bench times the correct one-layer program: the order, the dispose policy, the layer
    # count or the replays of `run` would be ignored there, so they are not offered.
    assert {"--tokens", "--hidden", "--intermediate", "--experts", "--top-k", "--dtype", "--seed"} <= options("bench")
    assert not {"--order", "--dispose", "--shared-mode", "--layers", "--replays", "--inputs", "--pdl"} & options("bench")
    assert build_parser().parse_args(["bench"]) is not None
    assert _config(build_parser().parse_args(["bench", "--tokens", "8"])) == MoEConfig(tokens=8)


def test_decode_offers_no_replay_or_capture_mode_flags_and_its_suite_flags_need_single(capsys):
    assert not {"--replays", "--inputs", "--capture-mode"} & options("decode")
    assert {"--order", "--layers", "--steps", "--single"} <= options("decode")
    with pytest.raises(SystemExit) as exit_:
        main(["decode", "--order", "shared_first"])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("usage: python -m gpu_demo decode ")
    assert lines[-1].startswith("python -m gpu_demo decode: error: --order only with --single")


@pytest.mark.parametrize("argv, kind", [(["run", "--matrix"], "matrix"), (["decode"], "decode"),
                                        (["bench"], "bench"), (["bench", "--pdl-only"], "pdl")])
def test_the_committed_results_are_not_overwritten_without_out(monkeypatch, tmp_path, capsys, argv, kind):
    import gpu_demo.lab.cli.main as cli

    committed = tmp_path / f"{kind}-h200.json"
    committed.write_text("{}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cli, "default_path", lambda k: tmp_path / f"{k}-h200.json")
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"gpu_demo {argv[0]}: {committed} is already there (the committed results); "
                    "pass --out FILE, that path itself to replace them")
    assert committed.read_text() == "{}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a seat without CUDA answers")
@pytest.mark.parametrize("argv, first", [
    (["fidelity"], "| scenario | simulator predicts | H200 showed | agree | checker |"),
    (["corpus", "--summary"], "On the NVIDIA H200 ("),
    (["recorder-overhead", "--dry-run", "--layers", "1", "--repeats", "1"], "stack "),
    (["record", "--dry-run", "--dispose", "skip_in_capture"], "routed_first/static_buffer/skip_in_capture: a CPU dry run only"),
    (["check", "gpu_demo.lab.corpus.safe_single_stream:make"], "gpu_demo.lab.corpus.safe_single_stream:make: "),
])
def test_the_commands_the_epilog_says_run_on_a_cpu_do(capsys, argv, first):
    assert argv[0] in build_parser().epilog
    # check runs without CUDA: it passes on a GPU seat, and on a CPU it answers NOT CHECKED ON A GPU (4)
    assert main(argv) in ((0, 4) if argv[0] == "check" else (0,))
    assert capsys.readouterr().out.splitlines()[0].startswith(first)


def test_the_corpus_summary_answers_for_the_programs_asked_and_refuses_a_runs_flags(capsys):
    assert main(["corpus", "--summary", "--only", "safe_dual_stream", "serve_vllm_buckets"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == ["safe_dual_stream", "serve_vllm_buckets"]
    assert out.startswith("Of the programs asked for, on the NVIDIA H200 (")
    assert "passed 1 of 1 safe ones" in out and "passed 2 of 2 safe ones" in out   # check_capture, whole process
    assert main(["corpus", "--summary", "--only", "no_such_program"]) == 2
    assert "unknown program(s) no_such_program" in capsys.readouterr().err
    assert main(["corpus", "--summary", "--jobs", "4", "--anchors"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == ("gpu_demo corpus: --summary prints the committed results and runs nothing: leave out --jobs, "
                    "--anchors, or leave out --summary to run on a GPU")


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a seat without CUDA answers")
@pytest.mark.parametrize("command", ["run", "bench", "decode", "corpus", "recorder-overhead", "record"])
def test_every_other_command_says_it_needs_cuda_in_one_line(capsys, command):
    assert main([command]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gpu_demo {command}: needs a CUDA GPU and none is visible")
