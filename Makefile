# The README's commands. Each sets up .venv on first use (python3 -m venv + pip).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CKSUM := $(shell cksum pyproject.toml | cut -d' ' -f1)
LEARNER := $(VENV)/.learner-$(CKSUM)
TESTER := $(VENV)/.tester-$(CKSUM)
SITE = "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
# JupyterLab refuses to run as root without this flag (classroom containers often are root).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: install tutorial headline test check lint bench html clean
.DEFAULT_GOAL := install

# The learner's install: torch as this machine wants it (scripts/install_torch.py: the CPU build
# where there is no NVIDIA GPU), the project and JupyterLab; no test or lint tool. Then the .pth
# that makes CAPTURE_ORDER_CHECK=1 work in any program (an editable install skips it).
$(LEARNER):
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python scripts/install_torch.py
	$(BIN)/python -m pip install --quiet -e ".[tutorial]"
	cp capture_order_check.pth $(SITE)
	rm -f $(VENV)/.learner-* && touch $@

# The tests' install: every extra (the pinned torch and torchvision, the test tools, the zoo's
# transformers and timm). It leaves the learner's stamp too: make tutorial then installs nothing.
$(TESTER):
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python scripts/install_torch.py --test
	$(BIN)/python -m pip install --quiet -e ".[all]"
	cp capture_order_check.pth $(SITE)
	rm -f $(VENV)/.learner-* $(VENV)/.tester-* && touch $(LEARNER) $@

install: $(LEARNER)  ## the learner's install alone (what make tutorial runs first)

# JUPYTER_ARGS goes to JupyterLab: make tutorial JUPYTER_ARGS="--no-browser --ip=0.0.0.0 --port=8888"
tutorial: $(LEARNER)  ## open the tutorial in JupyterLab, on the first notebook
	$(BIN)/jupyter lab notebooks/00-overview.ipynb $(ROOT_FLAG) $(JUPYTER_ARGS)

headline: $(LEARNER)  ## no browser: print and save the headline comparison
	$(BIN)/python -m simlib headline --out out --gpu-results gpu_demo/lab/results/matrix-h200.json

# Every test in three runs: the fast tests over the cores, nbval over the notebooks (one kernel at a
# time: it must not run under xdist), the browser tests (one JupyterLab at a time).
test: $(TESTER)  ## every test CI runs
	$(BIN)/python -m pytest tests -m "not browser" -o addopts= -n auto $(PYTEST_ARGS)
	$(BIN)/python -m pytest notebooks $(PYTEST_ARGS)
	$(BIN)/python -m pytest tests -m browser -o addopts= $(PYTEST_ARGS)

# The quick loop while editing: no notebooks, no browser, no slow test, tests spread over the cores.
check: $(TESTER)  ## the fast tests (no nbval, no browser, no slow test), about two minutes on two cores
	$(BIN)/python -m pytest tests -m "not browser and not slow" -o addopts= -q -n auto $(PYTEST_ARGS)

lint: $(TESTER)  ## ruff, configured in pyproject.toml
	$(BIN)/ruff check simlib gpu_demo tests scripts benchmarks

html: $(LEARNER)  ## the static HTML edition, widget state embedded: out/html/index.html
	$(BIN)/python scripts/build_html.py --out out/html

bench: $(LEARNER)  ## the simulator's speed benchmark
	$(BIN)/python -m simlib.bench

clean:
	rm -rf $(VENV) out .pytest_cache
