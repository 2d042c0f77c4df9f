# Two commands for a fresh machine:
#   make demo   create .venv, install everything, index the bundled sample corpus, run searches
#   make test   create .venv, install everything, run the whole test suite
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first: the pinned CPU build; an unpinned torch drags in GBs of CUDA.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/nbmemory demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -m "not slow" -q

lint: $(STAMP)
	$(BIN)/ruff check nbmemory tests bench
	$(BIN)/mypy nbmemory

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python bench/bench_search.py

clean:
	rm -rf $(VENV) build *.egg-info
