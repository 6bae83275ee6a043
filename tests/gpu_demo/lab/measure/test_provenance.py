"""A result names the code it ran: a digest of the packages' Python sources, and the commit that has it."""

from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("torch")

from gpu_demo.lab.measure import provenance  # noqa: E402


def test_the_digest_follows_the_sources_and_names_the_commit_that_has_them(tmp_path, monkeypatch):
    for name, text in {"simlib/engine.py": "A = 1\n", "gpu_demo/guard.py": "B = 2\n", "notes.md": "x\n"}.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    first = provenance.source_digest()
    (tmp_path / "notes.md").write_text("y\n")               # not a source: the same code
    assert provenance.source_digest() == first
    (tmp_path / "simlib" / "engine.py").write_text("A = 3\n")
    edited = provenance.source_digest()
    assert edited != first and provenance.commit_of(edited) is None    # not committed yet
    subprocess.run([*git, "commit", "-qam", "second"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert provenance.commit_of(edited) == head
    assert provenance.commit_of(first) == subprocess.run(
        [*git, "rev-parse", "HEAD~1"], capture_output=True, text=True).stdout.strip()


def test_every_result_written_says_which_sources_ran():
    assert provenance.provenance(["corpus"])["source"] == provenance.source_digest()
