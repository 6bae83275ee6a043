"""Put torch into this environment the way its machine wants it (``make`` runs this first).

On Linux x86_64, PyPI's torch wheels are CUDA builds (about 5.5 GB in a venv): right for a seat
with an NVIDIA GPU, a waste on a laptop. So, in order:

- torch already installed (a GPU seat's own build, an earlier ``make``): kept;
- an NVIDIA GPU here, or a system whose PyPI wheels are CPU builds (macOS, Windows, Linux on
  ARM): PyPI's build, at the pin of pyproject.toml's ``gpu`` extra;
- otherwise the CPU build: from PyTorch's CPU index, else a CPU build (``+cpu``) of torch lying
  in pip's own ``--find-links`` folders (a classroom's or CI's wheel cache), else none: the
  tutorial runs without torch but for notebooks 04 and 05, and this says so in one line.

``--test`` (``make test``) adds torchvision, built for the same torch (the ``vision`` extra). No
CPU build of both to be had: it leaves them to ``pip install ".[all]"``, PyPI's CUDA build.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_BUILD = re.compile(r"^torch-[^-]+\+cpu-.*\.whl$")


def pins() -> dict[str, str]:
    """``{"torch": "torch==...", "torchvision": "torchvision==..."}`` from pyproject.toml's extras."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {re.split(r"[=<>!~ ]", spec, maxsplit=1)[0]: spec for spec in extras["gpu"] + extras["vision"]}


def pinned(name: str) -> str:
    return pins()[name].split("==", 1)[1]


def installed(name: str) -> str:
    """The installed version without its build (``2.14.1`` for ``2.14.1+cpu``)."""
    return importlib.metadata.version(name).split("+", 1)[0]


def has_nvidia_gpu() -> bool:
    """A driver is loaded, or ``nvidia-smi`` lists a GPU."""
    if Path("/proc/driver/nvidia/version").exists():
        return True
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def source(system: str, machine: str, nvidia: bool) -> str:
    """``pypi`` where PyPI's wheel is the build this machine wants, else ``cpu``."""
    cuda_on_pypi = system == "Linux" and machine in ("x86_64", "AMD64")
    return "cpu" if cuda_on_pypi and not nvidia else "pypi"


def pip(*args: str) -> bool:
    return subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *args]).returncode == 0


def reachable(url: str) -> bool:
    """Whether ``url`` answers within seconds (pip would retry an unreachable index for minutes)."""
    try:
        urllib.request.urlopen(url, timeout=10).close()
    except OSError:
        return False
    return True


def local_cpu_wheel(folder: Path) -> Path | None:
    """A CPU build of torch from pip's ``--find-links`` alone (``--no-index``), if one lies there."""
    found = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-index", "--no-deps",
                            "--only-binary=:all:", "--dest", str(folder), "torch"], capture_output=True)
    wheels = [w for w in folder.glob("torch-*.whl") if CPU_BUILD.match(w.name)] if found.returncode == 0 else []
    return wheels[0] if wheels else None


def install(test: bool) -> str:
    """Install torch (and with ``test`` torchvision); return the one line that says what was done."""
    wanted = [pins()["torch"]] + ([pins()["torchvision"]] if test else [])
    if importlib.util.find_spec("torch") is not None and (not test or installed("torch") == pinned("torch")):
        return f"torch: kept {installed('torch')}, installed here"
    if source(platform.system(), platform.machine(), has_nvidia_gpu()) == "pypi":
        return f"torch: {' '.join(wanted)} from PyPI" if pip(*wanted) else "torch: PyPI's install failed"
    cpu_builds = [f"{spec}+cpu" for spec in wanted]   # a local version label: no other build matches
    if reachable(CPU_INDEX) and pip("--retries", "1", "--index-url", CPU_INDEX, *cpu_builds):
        return f"torch: {' '.join(cpu_builds)}, from {CPU_INDEX}"
    if test:
        return (f"torch: no CPU build from {CPU_INDEX}; the tests take PyPI's pinned build (a CUDA build, "
                "several GB)")
    with tempfile.TemporaryDirectory() as folder:
        wheel = local_cpu_wheel(Path(folder))
        if wheel is not None and pip(str(wheel)):
            return f"torch: the CPU build {wheel.name}, from pip's --find-links"
    return (f"torch: not installed: no NVIDIA GPU here and no CPU build from {CPU_INDEX}; notebooks 04 and 05 "
            f"need it (install torch's CPU build by hand, then `make` again)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--test", action="store_true", help="torchvision too, for the tests (make test)")
    print(install(parser.parse_args(argv).test))
    return 0


if __name__ == "__main__":
    sys.exit(main())
