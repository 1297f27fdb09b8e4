# attnlab: `make run` and `make test` work on a fresh machine with only Python 3.11.
# torch is installed first, pinned by constraints.txt, so pip never resolves a newer
# (CUDA-laden) torch when it installs the package.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# One stamp per extra: `make run` installs attnlab and its runtime dependencies only, `make test`
# adds the test extra (the peer libraries, Ray, Jupyter's kernel, mypy) on top.
TEST_STAMP      := $(VENV)/.installed-test
NOTEBOOKS_STAMP := $(VENV)/.installed-notebooks
DOCS_STAMP      := $(VENV)/.installed-docs

.PHONY: install run test test-fast test-browser notebooks bench docs docs-serve lint clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt torch
	$(BIN)/python -m pip install --quiet -c constraints.txt -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $(TEST_STAMP)

$(NOTEBOOKS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[notebooks]"
	touch $(NOTEBOOKS_STAMP)

# The main job: the positional-encoding lab's self-attention model on the noisy
# squares; leaves runs/selfattn-pe-<time>/ with metrics, checkpoint, figures, report.html.
run: $(STAMP)
	$(BIN)/attnlab train

# The labs as notebooks, in Jupyter (the notebooks extra: JupyterLab and a kernel on this .venv). Headless:
# no browser is opened; open the URL it prints (with its token). Jupyter refuses root without --allow-root,
# and root is who runs in most containers, so it is given then. To reach it from outside a container or
# another machine: make notebooks NOTEBOOK_ARGS="--ip 0.0.0.0" (and publish the port, 8888).
NOTEBOOK_ARGS ?=
notebooks: $(NOTEBOOKS_STAMP)
	$(BIN)/jupyter lab --no-browser $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(NOTEBOOK_ARGS) notebooks/

# One pytest-xdist worker per core (conftest.py gives each its share of torch's threads); a worker
# that runs out of tests takes some of the other's, so no long test is left alone at the end.
TEST_WORKERS ?= auto

# PYTHONDONTWRITEBYTECODE is emptied (= unset) for the suite: with it set, every process the tests start (CLI
# runs, sweep workers, torchrun ranks, notebook kernels) compiles attnlab's sources again, ~0.5 s each.
test: $(TEST_STAMP)
	PYTHONDONTWRITEBYTECODE= MPLBACKEND=Agg $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# The quick subset, for working: the tests that start no other process (no CLI in a subprocess, no workers,
# Ray, torchrun, notebook kernel or browser) and train through no whole run, by their markers `process` and
# `training` (tests/kinds.py marks by rule, and fails a test that starts a process without its mark).
test-fast: $(TEST_STAMP)
	PYTHONDONTWRITEBYTECODE= MPLBACKEND=Agg $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal \
		-m "not process and not training"

# The tests that open a page in headless Chromium, the report's viewer and the documentation site
# (`make test` skips them when no browser is installed): installs Chromium from the system's
# packages first if it is missing.
test-browser: $(TEST_STAMP)
	command -v chromium || (apt-get update && apt-get install -y chromium)
	MPLBACKEND=Agg $(BIN)/python -m pytest -m browser

# The tests that compute on a CUDA GPU (tests/gpu/: FlexAttention's compiled kernel forward and
# backward, float16/bfloat16 attention, train and compare with --device cuda, torchrun with nccl).
# `make test` skips them without a GPU; here too, each listed with the reason (-rs). In one process:
# the workers would share the one GPU and each compile FlexAttention's kernels again. They need a
# CUDA build of torch (torch.version.cuda set) and a GPU it finds: the skip reason says which is missing.
.PHONY: test-gpu
test-gpu: $(TEST_STAMP)
	PYTHONDONTWRITEBYTECODE= MPLBACKEND=Agg $(BIN)/python -m pytest -m cuda -rs

bench: $(TEST_STAMP)
	$(BIN)/python benchmarks/run.py

# attnlab against its peers on a CUDA GPU (benchmarks/gpu.py: attention, the bias schemes to 64k, rotary,
# decoding, the length lab's throughput), into benchmarks/results/gpu/ (gpu.json, gpu.md), in at most 8
# minutes on one H200; BENCHMARKS.md, "On a GPU". Without a GPU: .venv/bin/python benchmarks/gpu.py --device cpu --tiny
.PHONY: bench-gpu
bench-gpu: $(TEST_STAMP)
	$(BIN)/python benchmarks/gpu.py --device cuda

# The documentation site, into site/ (docs/build.py): the notebooks executed at full length by
# papermill, then MkDocs. ATTNLAB_DOCS_PARAMETERS='{"EPOCHS": 2}' make docs builds a quick one.
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/python docs/build.py

# The site served at http://127.0.0.1:8000 with live reload: an edit to docs/pages/ or the README shows at
# once (the notebooks come from the cache make docs fills). DOCS_ADDR=0.0.0.0:8000 to reach it from outside.
DOCS_ADDR ?= 127.0.0.1:8000
docs-serve: $(DOCS_STAMP)
	$(BIN)/python docs/build.py --serve --dev-addr $(DOCS_ADDR)

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy src

clean:
	rm -rf $(VENV) build site *.egg-info src/*.egg-info .pytest_cache
