"""Where a result came from: GPU, driver, library versions, date, command and the code.

Deliberately without the host name. Written into every results file, each in
``RESULTS_DIR`` (``gpu_demo.lab.results``, shipped with the package). The corpus and zoo
runners write it too.

The code is named by ``source``, a digest of the Python sources of ``simlib`` and
``gpu_demo``, not by a git commit: a lent GPU machine runs a copy of the working tree
whose own git history may be stale, so only the files themselves say which code ran.
``python -m gpu_demo.lab.measure.provenance DIGEST`` finds the commit whose sources
have that digest.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import platform
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Iterable

import torch

from gpu_demo.lab.results import RESULTS_DIR

__all__ = ["RESULTS_DIR", "provenance", "source_digest"]

PACKAGES = ("simlib", "gpu_demo")   # the code a result depends on; their Python sources are digested
ROOT = Path(__file__).resolve().parents[3]   # holds the packages (a checkout, or site-packages)


def source_digest() -> str:
    """12 hex digits naming the Python sources of ``PACKAGES`` as they are on disk now."""
    files = [(path.relative_to(ROOT).as_posix(), path.read_bytes())
             for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    return _digest(files)


def commit_of(digest: str, last: int = 200) -> str | None:
    """The newest of the last ``last`` commits of this checkout whose sources have ``digest``."""
    commits = subprocess.run(["git", "-C", str(ROOT), "rev-list", f"--max-count={last}", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.split()
    for commit in commits:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, *PACKAGES],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            files = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile() and m.name.endswith(".py")]
        if _digest(files) == digest:
            return commit
    return None


def _digest(files: Iterable[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:12]


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def provenance(argv: list[str], program: str = "gpu_demo") -> dict[str, Any]:
    """Provenance of a run started as ``python -m <program> <argv>``."""
    cuda = torch.cuda.is_available()
    return {
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "driver": _driver_version() if cuda else None,
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "triton": _triton_version(),
        "python": platform.python_version(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "-m", program, *argv]),
        "source": source_digest(),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Which commit of this checkout a result's 'source' digest names.")
    parser.add_argument("digest", help="the 'source' of a results file's provenance")
    parser.add_argument("--last", type=int, default=200, help="how many commits back to look")
    args = parser.parse_args(argv)
    commit = commit_of(args.digest, args.last)
    if commit is None:
        print(f"no commit among the last {args.last} has sources with digest {args.digest} "
              "(uncommitted changes, or an older commit: try --last)", file=sys.stderr)
        return 1
    print(commit)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
