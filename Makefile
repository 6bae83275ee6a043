# The README's commands. Each sets up .venv on first use (python3 -m venv + pip).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
# JupyterLab refuses to run as root without this flag (classroom containers often are root).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: tutorial headline test check lint bench html clean

# Installs the project; then copies the .pth that makes CAPTURE_ORDER_CHECK=1 work in any program
# (an editable install skips it).
$(STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[all]"
	cp capture_order_check.pth "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
	rm -f $(VENV)/.installed-* && touch $@

# JUPYTER_ARGS goes to JupyterLab: make tutorial JUPYTER_ARGS="--no-browser --ip=0.0.0.0 --port=8888"
tutorial: $(STAMP)  ## open the tutorial in JupyterLab, on the first notebook
	$(BIN)/jupyter lab notebooks/00-overview.ipynb $(ROOT_FLAG) $(JUPYTER_ARGS)

headline: $(STAMP)  ## no browser: print and save the headline comparison
	$(BIN)/python -m simlib headline --out out --gpu-results gpu_demo/lab/results/matrix-h200.json

test: $(STAMP)  ## every test CI runs
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The quick loop while editing: no notebooks, no browser, tests spread over the cores.
check: $(STAMP)  ## the fast tests (no nbval, no browser), under 2 minutes
	$(BIN)/python -m pytest tests -m "not browser" -o addopts= -q -n auto $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff, configured in pyproject.toml
	$(BIN)/ruff check simlib gpu_demo tests scripts benchmarks

html: $(STAMP)  ## the static HTML edition, widget state embedded: out/html/index.html
	$(BIN)/python scripts/build_html.py --out out/html

bench: $(STAMP)  ## the simulator's speed benchmark
	$(BIN)/python -m simlib.bench

clean:
	rm -rf $(VENV) out .pytest_cache
