"""The README's claims stay true: its tables are what the code computes now."""

from pathlib import Path

from gpu_demo.lab.cli.main import fidelity_report

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_the_fidelity_tables_in_the_readme_are_current():
    start = README.index("<!-- fidelity:start (python -m gpu_demo fidelity) -->")
    end = README.index("<!-- fidelity:end -->")
    quoted = README[start:end].split("\n", 1)[1].strip()
    assert quoted == fidelity_report().strip(), (
        "README's fidelity tables are stale: paste the output of `python -m gpu_demo fidelity`")


def test_the_readme_names_the_two_commands():
    assert "make tutorial" in README and "make test" in README


def test_the_readme_says_how_to_pass_options_to_jupyterlab():
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert "$(JUPYTER_ARGS)" in makefile
    assert 'make tutorial JUPYTER_ARGS="' in README
