# The two set-up commands of the README: `make demo` (the main job) and `make test` (the test suite).
# Both create .venv on first use and install the pinned dependencies into it.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint bench-quick corpus default-pack clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tvm-transfer demo --profile

test: $(STAMP) lint
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks.baselines --quick
	$(BIN)/python -m benchmarks.features --quick

# The default transfer pack (docs/transfer_pack.md): collect its corpus (resumable, hours, low priority),
# then build the pack shipped in the package from it.
corpus: $(STAMP)
	nice -n 19 $(BIN)/python -m benchmarks.corpus collect

default-pack: $(STAMP)
	$(BIN)/python -m benchmarks.corpus pack

clean-venv:
	rm -rf $(VENV)
