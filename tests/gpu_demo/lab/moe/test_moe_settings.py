"""The demo's settings and configuration, and the commands that need CUDA, on a CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
from small_moe import REPO, no_cuda

from gpu_demo.lab.cli.main import main
from gpu_demo.lab.moe.settings import RunSettings


@pytest.mark.parametrize("field, value, names", [
    ("dtype", "int8", ["'int8'", "'bfloat16'", "'float16'", "'float32'"]),
    ("device", "tpu", ["'tpu'", "'auto'", "'cuda'", "'cpu'"]),
    ("seed", -1, ["seed", "-1"]),
])
def test_bad_settings_are_refused_with_the_valid_values(field, value, names):
    with pytest.raises(ValueError) as err:
        RunSettings(**{field: value})
    assert all(n in str(err.value) for n in names)


@no_cuda
def test_asking_for_cuda_without_cuda_is_refused():
    with pytest.raises(ValueError, match="no CUDA device"):
        RunSettings(device="cuda")


def test_cli_refuses_an_invalid_config_naming_the_field(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["record", "--dry-run", "--top-k", "9"])
    assert exit_.value.code == 2
    assert "top_k=9 is larger than experts=8" in capsys.readouterr().err


@no_cuda
@pytest.mark.parametrize("command", ["run", "bench", "decode", "record"])
def test_gpu_commands_without_cuda_print_one_line_and_exit_2(command, capsys):
    assert main([command]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs a CUDA GPU" in err


@no_cuda
def test_the_module_entry_point_exits_2_without_cuda():
    done = subprocess.run([sys.executable, "-m", "gpu_demo", "run", "--matrix"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "gpu_demo run: needs a CUDA GPU and none is visible"
