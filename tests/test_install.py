"""The first command is safe everywhere: the learner's install pulls no test tool and no CUDA build
of torch on a machine without an NVIDIA GPU (scripts/install_torch.py decides which torch)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

spec = importlib.util.spec_from_file_location("install_torch", ROOT / "scripts" / "install_torch.py")
install_torch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install_torch)


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[=<>!~\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_learners_install_asks_for_no_torch_and_no_test_tool():
    learner = names(PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["tutorial"])
    assert not learner & {"torch", "torchvision", "pytest", "ruff", "playwright", "nbval", "transformers", "timm"}


@pytest.mark.parametrize("system, machine, nvidia, source", [
    ("Linux", "x86_64", False, "cpu"),        # PyPI's wheel would be a CUDA build
    ("Linux", "x86_64", True, "pypi"),        # a GPU seat: what worked before
    ("Linux", "aarch64", False, "pypi"),      # PyPI's wheels are CPU builds there
    ("Darwin", "arm64", False, "pypi"),
    ("Windows", "AMD64", False, "pypi"),
])
def test_the_torch_source_follows_the_machine(system, machine, nvidia, source):
    assert install_torch.source(system, machine, nvidia) == source


def test_the_pins_are_pyprojects_and_only_a_cpu_wheel_counts_as_one():
    extras = PYPROJECT["optional-dependencies"]
    assert install_torch.pins()["torch"] in extras["gpu"] and install_torch.pins()["torchvision"] in extras["vision"]
    assert install_torch.CPU_BUILD.match("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert not install_torch.CPU_BUILD.match("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl")


def test_the_makefile_installs_the_learner_before_jupyterlab_and_the_tools_only_for_the_tests():
    learner = subprocess.run(["make", "-n", "tutorial", "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    tests = subprocess.run(["make", "-n", "test", "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    assert '-e ".[tutorial]"' in learner and "[all]" not in learner and "install_torch.py\n" in learner
    assert '-e ".[all]"' in tests and "install_torch.py --test" in tests
