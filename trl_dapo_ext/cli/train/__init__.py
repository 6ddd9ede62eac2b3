"""`trl-dapo train`: DAPO/GRPO training from a YAML recipe, on one GPU, several GPUs, or (tiny models) a CPU.

Built on TRL's own `TrlParser` with three dataclasses, so **every** field is both a YAML key and a command-line flag,
and flags override the YAML:

* `TrainScriptArguments` (this module): dataset, prompt/answer/tests columns, system prompt, reward functions by
  name, report;
* `DAPOConfig`: every `trl.GRPOConfig` / `transformers.TrainingArguments` field plus the DAPO fields;
* `trl.ModelConfig`: `model_name_or_path`, `dtype`, LoRA (`use_peft`, `lora_r`, ...) and bitsandbytes quantization
  (`load_in_4bit`, ...).

Examples::

    trl-dapo train --config gsm8k_lora_1gpu          # a shipped recipe by name (trl-dapo recipes lists them)
    trl-dapo train --config my_recipe.yaml --max_steps 20 --output_dir runs/try
    # several GPUs (see the multi_gpu_zero2_vllm_server recipe for the vLLM server side):
    accelerate launch --config_file "$(trl-dapo recipes path accelerate/zero2)" -m trl_dapo_ext.cli.main train \\
        --config multi_gpu_zero2_vllm_server

Reward functions are chosen by name (`reward_funcs: [math_reward, math_format_reward]`); see `REWARD_FUNCS` for the
names, or give a dotted import path (`my_package.rewards.my_reward`) as TRL's own `trl grpo` does.

Before the model loads, the recipe is checked and every problem is one line (exit status 2): a misspelt key (with
the closest known one), an unknown reward name, a dataset without the column a library reward grades against (and
the `answer_column` / `tests_column` that maps it), `use_vllm` without vLLM, a `max_completion_length` beyond the
model's context. Ctrl-C during training finishes the step, saves a full checkpoint (`output_dir/checkpoint-N`),
prints the command that resumes from it and exits with status 130 (a second Ctrl-C: at once, the model only).

After training the model (the LoRA adapter with `use_peft`) and `trainer_state.json` are saved in `output_dir`,
with `train_summary.json` (steps, wall time, steps/s, peak GPU memory) and, when matplotlib is installed, the
`trl-dapo report` dashboard (`report.png`, `report.txt`).

Modules: `arguments` (the dataclass, the reward names, the parser), `rewards`, `data`, `model` (loading and the
checks before it), `run` (`train` and `main`).
"""

from __future__ import annotations

from .arguments import (
    REWARD_FUNCS,
    TrainError,
    TrainScriptArguments,
    known_keys,
    make_parser,
    parse_args,
)
from .data import DATA_FILE_TYPES, check_local_path, load_train_dataset, prepare_dataset
from .model import (
    check_context_length,
    check_generation_backend,
    load_tokenizer,
    model_loading_kwargs,
)
from .rewards import check_reward_columns, resolve_reward_funcs
from .run import main, train

__all__ = [
    "DATA_FILE_TYPES",
    "REWARD_FUNCS",
    "TrainError",
    "TrainScriptArguments",
    "check_context_length",
    "check_generation_backend",
    "check_local_path",
    "check_reward_columns",
    "known_keys",
    "load_tokenizer",
    "load_train_dataset",
    "main",
    "make_parser",
    "model_loading_kwargs",
    "parse_args",
    "prepare_dataset",
    "resolve_reward_funcs",
    "train",
]
