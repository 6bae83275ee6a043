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
    assert "torch==2.13.0" in project["optional-dependencies"]["gpu"]


def test_the_conda_environment_gets_torchs_cpu_build_and_npm():
    # On Linux PyPI's torch is a CUDA build; the CPU one is on PyTorch's own index.
    deps = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
    assert "nodejs" in deps   # npm, which scripts/build_html.py needs once


def test_simlib_imports_neither_torch_nor_matplotlib_nor_gpu_demo():
    import subprocess
    import sys
    code = ("import sys, simlib, simlib.scenarios, simlib.spec; "
            "bad = [m for m in ('torch', 'matplotlib', 'gpu_demo') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
