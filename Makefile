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

.PHONY: setup demo test lint bench clean

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

test: setup
	$(BIN)/python -m pytest -q tests

lint: setup
	$(BIN)/ruff check g3cli stages tests

bench: setup
	$(BIN)/python -m stages.bench_scripts.run_all

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
