"""``python -m gpu_demo``'s command line: help that says every default, clean failures."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from gpu_demo.cli.main import _config, build_parser, main  # noqa: E402
from simlib.spec import MoEConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


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


def test_a_trace_out_in_a_new_folder_is_written(tmp_path, capsys):
    target = tmp_path / "new" / "trace.json"
    main(["record", "--dry-run", "--dispose", "skip_in_capture", "--trace-out", str(target)])
    assert target.read_text().startswith("{")


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
    from gpu_demo.cli.main import _errors_cell

    assert _errors_cell([0.0, 0.0, 0.0], 1e-2) == "0 0 0"
    assert _errors_cell([0.0] * 150 + [0.5, float("nan")] + [None], 1e-2) == "0 0 0 0 ... (3 of 153 wrong)"
