# Two entry points (see README): `make run` and `make test`. Both create .venv and install.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,slurm]'
	touch $(STAMP)

run: $(STAMP)  ## the embedded default sweep (CPU, tiny models, no download)
	$(BIN)/snakemake --cores all

test: $(STAMP)  ## the whole suite, slow tests included
	$(BIN)/ruff check .
	$(BIN)/pytest -q

test-fast: $(STAMP)  ## skip tests marked slow
	$(BIN)/pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/snakemake --lint

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
