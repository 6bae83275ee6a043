"""The README's and the results page's claims stay true: their tables are what the code computes now."""

from pathlib import Path

from gpu_demo.lab.cli.main import fidelity_report

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
RESULTS_PAGE = (ROOT / "docs" / "results.md").read_text()


def test_the_fidelity_tables_in_the_results_page_are_current():
    start = RESULTS_PAGE.index("<!-- fidelity:start (python -m gpu_demo fidelity) -->")
    end = RESULTS_PAGE.index("<!-- fidelity:end -->")
    quoted = RESULTS_PAGE[start:end].split("\n", 1)[1].strip()
    assert quoted == fidelity_report().strip(), (
        "docs/results.md's fidelity tables are stale: paste the output of `python -m gpu_demo fidelity`")


def test_the_readme_names_the_two_commands():
    assert "make tutorial" in README and "make test" in README


def test_the_readme_says_how_to_pass_options_to_jupyterlab():
    makefile = (ROOT / "Makefile").read_text()
    assert "$(JUPYTER_ARGS)" in makefile
    assert 'make tutorial JUPYTER_ARGS="' in README
