# Two commands for a fresh machine:
#   make demo   create .venv, install everything, index the bundled sample corpus, run searches
#   make test   create .venv, install everything, run the whole test suite
# While working: make check   lint, types and the fast unit tests (about 2 minutes)
#                make docs    the documentation site into site/, offline (mkdocs build --strict)
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-slow check lint bench docs clean

# Test processes (pytest-xdist): one per core, at most four; a module's tests stay together, so
# its expensive fixtures (a real index, a Jupyter server) are made once, and the modules are
# handed out in collection order, longest first (tests/conftest.py). PARALLEL= runs serially.
PARALLEL ?= -n auto --maxprocesses 4 --dist loadscope --no-loadscope-reorder

# Bytecode is kept (these machines set PYTHONDONTWRITEBYTECODE=1, so every test process compiled
# the package and pytest rewrote every test module's asserts again): collecting the tests took
# 18.6 s per process, 12.1 s with it. Git ignores __pycache__; the wheel and sdist hold none.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml requirements.lock
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The tested set, exact versions (requirements.lock; pyproject.toml states ranges). Its torch is
	# the CPU build: a torch resolved from PyPI alone drags in GBs of CUDA.
	$(BIN)/python -m pip install --quiet -r requirements.lock -e '.[dev]'
	# An editable install skips [tool.setuptools.data-files]: put in place what a wheel install
	# puts there (the server extension's config, the prebuilt labextension), offline.
	install -D -m 644 jupyter-config/jupyter_server_config.d/nbmemory.json \
		$(VENV)/etc/jupyter/jupyter_server_config.d/nbmemory.json
	mkdir -p $(VENV)/share/jupyter/labextensions
	ln -sfn $(CURDIR)/nbmemory/labextension $(VENV)/share/jupyter/labextensions/nbmemory
	touch $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/nbmemory demo

test: $(STAMP)
	# The UI tests drive Debian's Chromium (no browser download); they skip if it cannot be had.
	command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
		|| echo "chromium could not be installed: the UI tests will be skipped"
	# The team tests start Debian's PostgreSQL as their catalog; they skip if it cannot be had.
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq postgresql >/dev/null) \
		|| echo "postgresql could not be installed: the team tests will be skipped"
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -m "not slow" -q $(PARALLEL)

# The long runs: sustained sharing with owner kills (thousands of writes), the real-model BEIR slice.
test-slow: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -m slow -q -s

# Lint, types, and the tests that need no real model, process, server, browser or corpus of real
# size (markers in pyproject.toml), property tests with a quarter of their examples (tests/quick.py);
# `make test` runs them all, in full.
check: lint
	HF_HUB_OFFLINE=1 NBMEMORY_TEST_QUICK=1 $(BIN)/python -m pytest -q -m "not slow and not model and not integration and not ui" $(PARALLEL)

lint: $(STAMP)
	$(BIN)/ruff check nbmemory tests bench tools
	$(BIN)/mypy nbmemory

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.search.bench_search

# Warnings are errors and every internal link and anchor must resolve (mkdocs.yml: strict, validation);
# the reference and the benchmark results pages are generated at build time (tools/docs_pages.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 HF_HUB_OFFLINE=1 $(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) build site *.egg-info
