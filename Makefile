# g3 — set-up, demo, tests, lint, benchmarks.
# TORCH_SPEC picks the torch build installed before the project (default: the local CPU wheel).
PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
BIN         := $(VENV)/bin
G3          := $(BIN)/g3
DEMO_DIR    ?= demo
DEMO_PRESET ?= small
DEMO_WORKERS ?= 4
STAMP       := $(VENV)/.g3-installed

.PHONY: setup demo test test-fast lint format bench clean peers peers-minibatch peers-dgl gpu-check gpu-bundle

# Peers for `g3 bench`: PyG in g3's own environment; DGL in a separate legacy environment (see docs/BENCHMARKS.md).
DGL_VENV    ?= .venv-dgl
DGL_PYTHON  ?= $(PYTHON)
DGL_SPECS   ?= torch==2.2.1 dgl==2.1.0 "numpy<2" "setuptools<70" pandas "torchdata<0.8" pydantic pyyaml scipy psutil

setup: $(STAMP)

# Re-install only when the project definition changes; quick no-op otherwise.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: setup
	DEMO_DIR=$(DEMO_DIR) DEMO_PRESET=$(DEMO_PRESET) DEMO_WORKERS=$(DEMO_WORKERS) G3=$(G3) bash examples/demo.sh

# Tests run in TEST_PROCS pytest processes (pytest-xdist): much of a test that launches workers or a `g3`
# subprocess is waiting, which the other process fills (in one process the suite used ~40 % of the 2 cores;
# three processes were slower than two). The 20 slowest tests are listed at the end (docs/BENCHMARKS.md, "The test suite").
TEST_PROCS  ?= 2
# The linter first (a second): CI runs `make test`, so the rules it checks hold on main.
test: setup lint
	$(BIN)/python -m pytest -q -n $(TEST_PROCS) --durations=20 tests

# A developer's quick signal (< 2 min on 2 cores): every test but those marked slow (the ones that launch workers)
test-fast: setup
	$(BIN)/python -m pytest -q -n $(TEST_PROCS) -m "not slow" tests

# ruff's linter and formatter, the architecture's rules (.importlinter: three layers, each stage's internals its
# own, no import circles), then mypy on the declarations every layer shares (pyproject.toml, [tool.mypy]);
# `make format` rewrites what the formatter would change
LINTED      := g3 g3cli stages tests examples
lint: setup
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

# g3 against its peers on the built-in `small` graph (PyG with `make peers`, DGL with `make peers-dgl`);
# the other benchmarks of docs/BENCHMARKS.md are listed there with their commands.
BENCH_DIR   ?= bench-out
BENCH_PRESET ?= small
bench: setup
	test -d $(BENCH_DIR)/$(BENCH_PRESET) || $(G3) ingest synthetic:$(BENCH_PRESET) $(BENCH_DIR)/$(BENCH_PRESET)
	$(G3) bench $(BENCH_DIR)/$(BENCH_PRESET) --workers 1,2,4 --epochs 5 -o $(BENCH_DIR)/bench-$(BENCH_PRESET) --force

# `make gpu-check` (docs/BENCHMARKS.md, "GPU check"): g3, bns-gcn and distdgl on CUDA on synthetic small and medium
# with PyG beside them, then the CPU references as time allows, within 300 s with its preparation (its estimate is
# printed first; what does not fit is trimmed); each finished step is in GPU_CHECK_DIR at once (gpu-check.json,
# gpu-check.md). GPU_CHECK_ARGS=--full: every strategy, g3 (bins) and K = 2, for a longer stay. Without CUDA it
# says so and exits 0. GPU_PYTHON: the first of the venv's Python and python3 whose torch sees CUDA (else python3);
# nothing is installed. What that Python lacks comes from `make gpu-bundle` (run here): the pure-Python
# dependencies' wheels, and a few small compiled ones for CPython GPU_BUNDLE_PY, in .gpu-bundle/ (git-ignored,
# ~13 MiB; carry it), which the check unpacks and puts on its path; a module still missing is named in one line.
GPU_CHECK_DIR ?= gpu-check
GPU_CHECK_ARGS ?=
GPU_PYTHON  ?= $(or $(shell for p in $(BIN)/python python3; do $$p -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1 && { echo $$p; break; }; done),python3)
GPU_BUNDLE_PY ?= 3.12
gpu-check:
	$(GPU_PYTHON) examples/gpu_check.py --out $(GPU_CHECK_DIR) $(GPU_CHECK_ARGS)

gpu-bundle: setup
	$(BIN)/python examples/gpu_check.py --make-bundle --bundle-python $(GPU_BUNDLE_PY)

format: setup
	$(BIN)/ruff check --fix $(LINTED)
	$(BIN)/ruff format $(LINTED)

peers: setup
	$(BIN)/python -m pip install -q -e ".[peers]"

# PyG's mini-batch peer: NeighborLoader samples with pyg-lib or torch-sparse, and neither has a wheel for this torch
# (nor pyg-lib a source release on the index), so this builds torch-sparse, and the torch-scatter it imports, from
# their source releases against the venv's torch, CPU kernels only (NeighborLoader samples on the CPU anyway; 28 min
# on 2 busy cores). The wheels are kept in .whl/, one folder per torch version, and reinstalled from there. Optional:
# g3 needs neither; without them the mini-batch PyG row of `g3 bench` says "not installed".
PEERS_MB_SPECS  ?= torch-scatter==2.1.2 torch-sparse==0.6.18
PEERS_MB_WHEELS  = .whl/peers-minibatch/torch-$(shell $(BIN)/python -c "import torch; print(torch.__version__)")
MAX_JOBS        ?= 2
peers-minibatch: peers
	ls $(PEERS_MB_WHEELS)/torch_scatter-*.whl $(PEERS_MB_WHEELS)/torch_sparse-*.whl >/dev/null 2>&1 || \
	  FORCE_ONLY_CPU=1 MAX_JOBS=$(MAX_JOBS) $(BIN)/python -m pip wheel --no-cache-dir --no-deps --no-build-isolation \
	    --no-binary :all: -w $(PEERS_MB_WHEELS) $(PEERS_MB_SPECS)
	$(BIN)/python -m pip install -q --no-deps --no-index -f $(PEERS_MB_WHEELS) $(PEERS_MB_SPECS)
	$(BIN)/python -c "import torch_geometric.typing as t; assert t.WITH_TORCH_SPARSE; print('NeighborLoader: torch-sparse')"

# torch 2.2.1 from PyPI is the CUDA 12.1 build: pip also fetches the nvidia-* wheels (~2.7 GB); it runs on CPU.
peers-dgl:
	test -x $(DGL_VENV)/bin/python || $(DGL_PYTHON) -m venv $(DGL_VENV)
	$(DGL_VENV)/bin/python -m pip install -q --upgrade pip
	$(DGL_VENV)/bin/python -m pip install -q $(DGL_SPECS)
	$(DGL_VENV)/bin/python -c "import dgl, torch; print('DGL', dgl.__version__, 'torch', torch.__version__)"

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
