#!/usr/bin/env bash
# Prepared GPU check (issue 16): DAPOTrainer with dynamic sampling and a LoRA adapter, a tiny model in bf16 on CUDA,
# under TRL 1.16 and TRL 1.15 (1.15's Triton log-prob kernel, without the CPU shim the CPU suite needs), then under
# TRL 1.16 with DeepSpeed ZeRO-2 through `accelerate launch --config_file recipes/accelerate/zero2.yaml` on every
# visible GPU (NCCL, bf16; the CPU lane `make test-distributed` covers gloo). Prints steps/s and peak GPU memory per
# run, and the engine and ZeRO stage the ZeRO-2 run really used. Budget: under 8 minutes on one GPU (the training
# itself takes seconds; most of it is imports and three pip installs from local wheels).
#
# The GPU machine has Python and PyTorch (CUDA) but cannot reach a package registry, so everything else travels
# with the working tree as wheels:
#
#   bash benchmarks/gpu_check.sh prepare       # here, with registry access: wheels into benchmarks/.gpu_wheels/
#   bash benchmarks/gpu_check.sh               # there: installs from those wheels only, runs, prints
#
# `prepare` downloads wheels for the GPU machine's Python (GPU_PYTHON_VERSION, default 3.11; manylinux x86_64).
# Never run in this project's CI (no GPU); see docs/backends.md.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=benchmarks/.gpu_wheels
PYTHON=${PYTHON:-python3}
PYVER=${GPU_PYTHON_VERSION:-3.11}
WORK=${GPU_CHECK_DIR:-/tmp/trl-dapo-gpu-check}
DEEPSPEED_VERSION=0.19.8  # as the CPU lane (Makefile DEEPSPEED_VERSION)

if [[ "${1:-}" == "prepare" ]]; then
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    PLATFORM=(--only-binary=:all: --python-version "$PYVER" --platform manylinux_2_28_x86_64
              --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
    # TRL 1.16 with every dependency for the target Python. torch is named so that pip resolves it from this
    # machine's local CPU wheel (pip.conf find-links) instead of downloading a CUDA build; it is then dropped: the
    # GPU machine has its own.
    $PYTHON -m pip download -q -d "$WHEELS" "${PLATFORM[@]}" "trl==1.16.0" "peft>=0.17" "torch==2.13.0"
    $PYTHON -m pip download -q -d "$WHEELS" "${PLATFORM[@]}" --no-deps "trl==1.15.0"
    # DeepSpeed is an sdist on PyPI: built here into a pure-Python wheel (its ops compile on first use, if at all).
    $PYTHON -m pip wheel -q --no-deps -w "$WHEELS" "deepspeed==$DEEPSPEED_VERSION"
    $PYTHON -m pip download -q -d "$WHEELS" "${PLATFORM[@]}" einops hjson msgpack ninja py-cpuinfo "pydantic>=2"
    # torch and what every torch install brings along are on the GPU machine already.
    for name in torch nvidia_ triton- sympy- mpmath- networkx- jinja2- markupsafe- filelock- fsspec- \
        typing_extensions- setuptools-; do
        rm -f "$WHEELS"/${name}*.whl "$WHEELS"/$(echo "$name" | sed 's/^./\u&/')*.whl
    done
    $PYTHON -m pip wheel -q --no-deps -w "$WHEELS" .  # trl-dapo-ext itself (its trainer needs no other extra)
    # The device tool carries at most 64 MiB of ignored files; pyarrow (for datasets) alone is ~53 MB.
    du -sh "$WHEELS"
    exit 0
fi

started=$(date +%s)
$PYTHON -c "import torch, sys; assert torch.cuda.is_available(), 'no CUDA GPU'; print('torch', torch.__version__, torch.cuda.get_device_name())"
[[ -d "$WHEELS" ]] || { echo "no $WHEELS: run 'bash benchmarks/gpu_check.sh prepare' where a registry is reachable"; exit 2; }
rm -rf "$WORK" && mkdir -p "$WORK"
# A venv that sees the machine's own torch; everything else from the wheels, never from a registry.
$PYTHON -m venv --system-site-packages "$WORK/venv"
VPY="$WORK/venv/bin/python"
$VPY -m pip install -q --no-index --find-links "$WHEELS" "trl==1.16.0" "peft>=0.17"
$VPY -m pip install -q --no-index --find-links "$WHEELS" --no-deps trl-dapo-ext  # matplotlib, math-verify: unused here
$VPY -m pip install -q --no-index --find-links "$WHEELS" --no-deps --target "$WORK/trl-1.15.0" "trl==1.15.0"
$VPY -m pip install -q --no-index --find-links "$WHEELS" "deepspeed==$DEEPSPEED_VERSION"

cat > "$WORK/check.py" <<'PY'
import json, os, sys, time, warnings
warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch, trl
from datasets import Dataset
from peft import LoraConfig
from trl_dapo_ext import DAPOConfig, DAPOTrainer
from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm

def reward(completions, kind, **kwargs):  # half the groups zero-variance: dynamic sampling refills
    return [1.0 if k == "flat" else sum(c.isdigit() for c in t) / max(len(t), 1) for t, k in zip(completions, kind)]

tokenizer = build_char_tokenizer(alphabet="0123456789+=# ", add_bos=True, words=("#### ",))
model = build_tiny_causal_lm(tokenizer, hidden_size=256, num_layers=4, num_heads=4, max_positions=128).to(torch.bfloat16)
rows = [{"prompt": f"{a}+{a % 7}=", "kind": "flat" if a % 2 else "varied"} for a in range(10, 266)]
args = DAPOConfig(
    output_dir=sys.argv[1], bf16=True, per_device_train_batch_size=32, num_generations=8, max_completion_length=32,
    max_steps=int(os.environ.get("GPU_CHECK_STEPS", "20")), learning_rate=1e-3, logging_steps=1, report_to="none",
    save_strategy="no", seed=0, disable_tqdm=True, dynamic_sampling=True, dynamic_sampling_oversample=1.0,
    dynamic_sampling_on_exhausted="fill", diagnostics=True, use_vllm=False,
)
peft = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
trainer = DAPOTrainer(model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(rows),
                      processing_class=tokenizer, peft_config=peft)
torch.cuda.reset_peak_memory_stats()
started = time.perf_counter()
trainer.train()
wall = time.perf_counter() - started
rounds = [h["dynamic_sampling/rounds"] for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
plugin = trainer.accelerator.state.deepspeed_plugin
if not trainer.accelerator.is_main_process:
    sys.exit(0)
print(json.dumps({
    "trl": trl.__version__, "gpu": torch.cuda.get_device_name(), "steps": trainer.state.global_step,
    "processes": trainer.accelerator.num_processes, "engine": type(trainer.model_wrapped).__name__,
    "zero_stage": plugin.zero_stage if plugin is not None else None,
    "steps_per_s": round(trainer.state.global_step / wall, 3), "rounds_per_step": round(sum(rounds) / len(rounds), 2),
    "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3),
    "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 3),
}))
PY

echo "--- TRL 1.16"
$VPY "$WORK/check.py" "$WORK/out-116" | tail -1
echo "--- TRL 1.15 (its Triton log-prob kernel on CUDA; no CPU shim)"
PYTHONPATH="$WORK/trl-1.15.0" $VPY "$WORK/check.py" "$WORK/out-115" | tail -1
GPUS=$($VPY -c "import torch; print(torch.cuda.device_count())")
echo "--- TRL 1.16, DeepSpeed ZeRO-2 through accelerate on $GPUS GPU(s) (expect engine DeepSpeedEngine, zero_stage 2)"
$VPY -m accelerate.commands.launch --config_file recipes/accelerate/zero2.yaml --num_processes "$GPUS" \
    "$WORK/check.py" "$WORK/out-zero2" | tail -1
echo "gpu_check: $(( $(date +%s) - started )) s in all"
