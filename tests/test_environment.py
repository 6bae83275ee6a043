"""The classroom environment installs what the project declares."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_parses_and_installs_the_project_with_every_extra():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert any(str(d).startswith("python=3.11") for d in deps)
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"]) - {"all"}
    line = next(p for p in pip if p.startswith("-e "))
    named = set(line.split("[", 1)[1].split("]", 1)[0].split(","))
    assert named == extras


def test_torch_is_pinned_so_every_seat_with_the_gpu_extra_gets_one_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch==2.14.1" in project["optional-dependencies"]["gpu"]
    # torchvision is built for one torch: its pin must be the one for that torch
    assert "torchvision==0.29.1" in project["optional-dependencies"]["vision"]


def test_the_conda_environment_gets_torchs_cpu_build_and_npm():
    # On Linux PyPI's torch is a CUDA build; the CPU one is on PyTorch's own index.
    deps = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
    assert "nodejs" in deps   # npm, which scripts/build_html.py needs once


def test_simlib_imports_neither_torch_nor_matplotlib_nor_gpu_demo():
    import subprocess
    import sys
    code = ("import sys, simlib, simlib.programs.scenarios, simlib.programs.spec; "
            "bad = [m for m in ('torch', 'matplotlib', 'gpu_demo') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_the_seat_check_runs_the_commands_the_guide_and_the_readme_give():
    # scripts/check_gpu_install.py (the lead's H200 run) reads its commands from the documents,
    # so the install that is checked is the one a reader is told to type.
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_gpu_install", ROOT / "scripts" / "check_gpu_install.py")
    install_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install_check)
    install = install_check.bash_block(install_check.GUIDE, install_check.GUIDE_MARK).splitlines()
    assert "python3 -m pip install --no-deps --no-build-isolation -e ." in install
    assert any(line.startswith("cp capture_order_check.pth ") for line in install)
    assert not any("torch==" in line or "[gpu" in line or "[all" in line for line in install)   # keeps the seat's torch
    (test,) = install_check.bash_block(install_check.README, install_check.README_MARK).splitlines()
    assert test.startswith("python3 -m pytest tests ") and "-o addopts=" in test
    assert install_check.pytest_summary("...\n957 passed, 27 skipped, 15 warnings in 63.08s\n") == \
        "957 passed, 27 skipped, 15 warnings in 63.08s"
