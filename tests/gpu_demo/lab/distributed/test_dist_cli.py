"""``python -m gpu_demo.distributed``: a bad start says in one line what to do."""

from __future__ import annotations

import pytest

from gpu_demo.lab.cli.torchrun import main


def test_run_outside_torchrun_says_how_to_start_it(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    assert main(["run", "--tp", "2"]) == 2
    assert "torchrun --nproc-per-node 2 -m gpu_demo.distributed run --tp 2" in capsys.readouterr().err


@pytest.mark.parametrize("flags, words", [(["--tp", "0"], "at least 1"), (["--tp", "1", "--dtype", "int3"], "dtype="),
                                          (["--tp", "1", "--hidden", "0"], "hidden")])
def test_bad_options_are_refused_in_one_line(monkeypatch, capsys, flags, words):
    monkeypatch.setenv("RANK", "0")
    assert main(["run", *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["check"], ["check", "--strict"], ["check", "-m"]])
def test_check_without_a_script_prints_its_usage(capsys, argv):
    assert main(argv) == 2
    assert "usage: torchrun ... -m gpu_demo.distributed check" in capsys.readouterr().err
