# `make test` sets itself up on a fresh machine (a venv in .venv, CPU torch from the local wheel) and runs the suite,
# re-runs the trainer tests against the other supported TRL release, runs the docstring examples as doctests and
# builds the documentation site strictly.
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

.PHONY: setup test test-main test-trl-alt doctest docs demo lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,docs]"
	touch $@

setup: $(VENV)/.installed

$(ALT_DIR)/.installed: $(VENV)/.installed
	$(PY) -m pip install -q --no-deps --target $(ALT_DIR) trl==$(TRL_ALT)
	touch $@

test: test-main test-trl-alt doctest docs

test-main: setup
	$(PY) -m pytest -q

# Same trainer tests against the older supported TRL, shadowing the installed one via PYTHONPATH.
test-trl-alt: $(ALT_DIR)/.installed
	PYTHONPATH=$(ALT_DIR) $(PY) -m pytest -q -m trainer -p no:cacheprovider

# Every example in the package's docstrings and in the docs pages (the worked examples) runs as a doctest.
doctest: setup
	$(PY) -m pytest -q -p no:cacheprovider --doctest-modules trl_dapo_ext reward_funcs --doctest-glob="*.md" docs

# The site from docs/ and mkdocs.yml; --strict fails on broken links, anchors and API references. Output in site/.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# The main job on a fresh machine: a tiny model learns addition with DAPO on the CPU (2.5 to 4.5 minutes on 2 cores).
demo: setup
	$(PY) -m trl_dapo_ext.cli.main demo $(DEMO_ARGS)

lint: setup
	$(PY) -m ruff check trl_dapo_ext reward_funcs tests benchmarks
	$(PY) -m ruff format --check trl_dapo_ext reward_funcs tests benchmarks

clean:
	rm -rf $(VENV) $(ALT_DIR) .pytest_cache site
