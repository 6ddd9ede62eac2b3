# `make test` sets itself up on a fresh machine (a venv in .venv, CPU torch from the local wheel) and runs the suite,
# then re-runs the trainer tests against the other supported TRL release.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TRL_ALT ?= 1.15.0
ALT_DIR := .trl-$(TRL_ALT)
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export HF_HUB_DISABLE_TELEMETRY=1
export TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS=1

.PHONY: setup test test-main test-trl-alt demo lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

$(ALT_DIR)/.installed: $(VENV)/.installed
	$(PY) -m pip install -q --no-deps --target $(ALT_DIR) trl==$(TRL_ALT)
	touch $@

test: test-main test-trl-alt

test-main: setup
	$(PY) -m pytest -q

# Same trainer tests against the older supported TRL, shadowing the installed one via PYTHONPATH.
test-trl-alt: $(ALT_DIR)/.installed
	PYTHONPATH=$(ALT_DIR) $(PY) -m pytest -q -m trainer -p no:cacheprovider

# The main job on a fresh machine: a tiny model learns addition with DAPO on the CPU (2.5 to 4.5 minutes on 2 cores).
demo: setup
	$(PY) -m trl_dapo_ext.cli.main demo $(DEMO_ARGS)

lint: setup
	$(PY) -m ruff check trl_dapo_ext reward_funcs tests benchmarks
	$(PY) -m ruff format --check trl_dapo_ext reward_funcs tests benchmarks

clean:
	rm -rf $(VENV) $(ALT_DIR) .pytest_cache
