"""`trl-dapo train`: DAPO/GRPO training from a YAML recipe, on one GPU, several GPUs, or (tiny models) a CPU.

Built on TRL's own `TrlParser` with three dataclasses, so **every** field is both a YAML key and a command-line flag,
and flags override the YAML:

* `TrainScriptArguments` (this module): dataset, prompt/answer/tests columns, system prompt, reward functions by
  name, report;
* `DAPOConfig`: every `trl.GRPOConfig` / `transformers.TrainingArguments` field plus the DAPO fields;
* `trl.ModelConfig`: `model_name_or_path`, `dtype`, LoRA (`use_peft`, `lora_r`, ...) and bitsandbytes quantization
  (`load_in_4bit`, ...).

Examples::

    trl-dapo train --config recipes/gsm8k_lora_1gpu.yaml
    trl-dapo train --config recipes/gsm8k_lora_1gpu.yaml --max_steps 20 --output_dir runs/try
    # several GPUs (see recipes/multi_gpu_zero2_vllm_server.yaml for the vLLM server side):
    accelerate launch --config_file recipes/accelerate/zero2.yaml -m trl_dapo_ext.cli.main train \\
        --config recipes/multi_gpu_zero2_vllm_server.yaml

Reward functions are chosen by name (`reward_funcs: [math_reward, math_format_reward]`); see `REWARD_FUNCS` for the
names, or give a dotted import path (`my_package.rewards.my_reward`) as TRL's own `trl grpo` does.

After training the model (the LoRA adapter with `use_peft`) and `trainer_state.json` are saved in `output_dir`,
with `train_summary.json` (steps, wall time, steps/s, peak GPU memory) and, when matplotlib is installed, the
`trl-dapo report` dashboard (`report.png`, `report.txt`).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import ModelConfig, ScriptArguments, TrlParser

from trl_dapo_ext.config import DAPOConfig


def _math_answer_format_reward():
    from reward_funcs import make_math_format_reward

    # For instruct models that do not write <think> blocks: the bonus only asks for an anchored final answer.
    return make_math_format_reward(require_think=False, name="math_answer_format_reward")


def _code_reward_partial():
    from reward_funcs import make_code_reward

    return make_code_reward(partial_credit=True)


def _attribute(module: str, name: str) -> Callable[[], Any]:
    return lambda: getattr(importlib.import_module(module), name)


# name in the YAML -> factory of the reward callable. Factories, so that naming one reward never imports (or starts
# worker pools for) the others.
REWARD_FUNCS: dict[str, Callable[[], Any]] = {
    "math_reward": _attribute("reward_funcs", "math_reward"),
    "math_format_reward": _attribute("reward_funcs", "math_format_reward"),
    "math_answer_format_reward": _math_answer_format_reward,
    "code_reward": _attribute("reward_funcs", "code_reward"),
    "code_reward_partial": _code_reward_partial,
}
"""Reward functions `reward_funcs:` can name. `math_format_reward` wants ``<think>...</think>`` then an anchored
answer; `math_answer_format_reward` only the anchored answer; `code_reward_partial` gives the fraction of tests
passed instead of 0/1."""

DATA_FILE_TYPES = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


class TrainError(ValueError):
    """A problem with the recipe or its inputs, reported as one line (exit status 2)."""


@dataclass
class TrainScriptArguments(ScriptArguments):
    """Data and reward settings of `trl-dapo train` (TRL's `ScriptArguments` plus the fields below).

    Example (YAML)::

        dataset_name: openai/gsm8k
        dataset_config: main
        prompt_column: question
        answer_column: answer
        system_prompt: "Think step by step inside <think> </think>, then give the final answer as \\\\boxed{...}."
        reward_funcs: [math_reward, math_format_reward]
    """

    reward_funcs: list[str] = field(
        default_factory=lambda: ["math_reward", "math_format_reward"],
        metadata={
            "help": "Reward functions by name: "
            + ", ".join(REWARD_FUNCS)
            + ", or a dotted import path (my_package.rewards.my_reward). Weights: reward_weights."
        },
    )
    prompt_column: str = field(
        default="prompt", metadata={"help": "Dataset column holding the question (GSM8K: question)."}
    )
    prompt_template: str | None = field(
        default=None,
        metadata={
            "help": "Python format string over the row's columns that builds the prompt, e.g. "
            "'{text}\\nYour code should pass this test:\\n{test_list}' (list values are joined by newlines). "
            "Default: the prompt column as is."
        },
    )
    answer_column: str | None = field(
        default=None,
        metadata={"help": "Column with the gold answer, renamed to 'answer' for math_reward (GSM8K: answer)."},
    )
    tests_column: str | None = field(
        default=None,
        metadata={"help": "Column with the unit tests, renamed to 'tests' for code_reward (MBPP: test_list)."},
    )
    system_prompt: str | None = field(default=None, metadata={"help": "System message put before every prompt."})
    use_chat_template: bool = field(
        default=True,
        metadata={
            "help": "Send prompts as chat messages (TRL applies the tokenizer's chat template). False: plain text, "
            "the system prompt followed by a blank line and the prompt (base models without a template)."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N training rows (quick tries)."}
    )
    report: bool = field(
        default=True,
        metadata={"help": "Draw the trl-dapo report dashboard into output_dir after training (needs matplotlib)."},
    )


def make_parser(prog: str | None = None) -> TrlParser:
    """The parser of `trl-dapo train`: `TrainScriptArguments`, `DAPOConfig` and TRL's `ModelConfig`.

    >>> script_args, training_args, model_args = make_parser().parse_args_and_config(
    ...     ["--config", "recipes/gsm8k_lora_1gpu.yaml", "--use_cpu", "true", "--bf16", "false", "--use_vllm", "false"]
    ... )  # doctest: +SKIP
    """
    return TrlParser((TrainScriptArguments, DAPOConfig, ModelConfig), prog=prog)


def parse_args(argv: list[str] | None, prog: str | None = None):
    """Parse ``argv`` (``--config recipe.yaml`` and/or flags) into (script, training, model) arguments."""
    parser = make_parser(prog)
    # fail_with_unknown_args: a misspelt YAML key is an error, not a silently ignored setting.
    return parser.parse_args_and_config(argv, fail_with_unknown_args=True)


# ---------------------------------------------------------------------------------------------------------------------
# Rewards
# ---------------------------------------------------------------------------------------------------------------------


def resolve_reward_funcs(names: list[str]) -> list[Callable]:
    """Reward callables for the names of a recipe (registry names or dotted import paths).

    >>> [f.__name__ for f in resolve_reward_funcs(["math_reward"])]
    ['math_reward']
    >>> resolve_reward_funcs(["math_rewrad"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trl_dapo_ext.cli.train.TrainError: unknown reward function 'math_rewrad'; choose from math_reward, ...
    """
    if not names:
        raise TrainError("reward_funcs is empty; choose from " + ", ".join(REWARD_FUNCS))
    funcs = []
    for name in names:
        if name in REWARD_FUNCS:
            funcs.append(REWARD_FUNCS[name]())
        elif "." in name:
            module_name, attribute = name.rsplit(".", 1)
            # As TRL's `trl grpo`: modules next to the recipe's working directory are importable.
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            try:
                funcs.append(getattr(importlib.import_module(module_name), attribute))
            except (ImportError, AttributeError) as error:
                raise TrainError(f"cannot import reward function {name!r}: {error}") from None
        else:
            raise TrainError(
                f"unknown reward function {name!r}; choose from {', '.join(REWARD_FUNCS)}, "
                "or give a dotted import path (my_package.rewards.my_reward)"
            )
    return funcs


# ---------------------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------------------


def load_train_dataset(script_args: TrainScriptArguments):
    """The training split as a `datasets.Dataset`, from the hub, a local dataset folder or a data file.

    `dataset_name` may be a hub id (`openai/gsm8k`), a folder written by `Dataset.save_to_disk`, a folder of data
    files, or one `.json` / `.jsonl` / `.csv` / `.parquet` file (its rows are the training split).
    """
    from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

    name = script_args.dataset_name
    if not name:
        raise TrainError("dataset_name is required (a hub id, a local folder or a .json/.jsonl/.csv/.parquet file)")
    if script_args.dataset_streaming:
        raise TrainError("dataset_streaming is not supported: dynamic sampling needs a map-style dataset")
    path = Path(name).expanduser()
    split = script_args.dataset_train_split
    if path.is_file():
        kind = DATA_FILE_TYPES.get(path.suffix.lower())
        if kind is None:
            raise TrainError(f"{path}: unsupported file type; use one of {', '.join(DATA_FILE_TYPES)}")
        dataset = load_dataset(kind, data_files=str(path), split="train")
    elif path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file()):
        dataset = load_from_disk(str(path))
        if isinstance(dataset, DatasetDict):
            dataset = dataset[split]
    elif name.startswith((".", "/", "~")) and not path.exists():
        raise TrainError(f"dataset_name {name} does not exist")
    else:
        dataset = load_dataset(name, name=script_args.dataset_config, split=split)
    if not isinstance(dataset, Dataset):
        raise TrainError(f"expected a map-style dataset, got {type(dataset).__name__}")
    if script_args.max_train_samples is not None:
        dataset = dataset.select(range(min(script_args.max_train_samples, len(dataset))))
    return prepare_dataset(dataset, script_args)


def _format_value(value: Any) -> str:
    return "\n".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)


def prepare_dataset(dataset, script_args: TrainScriptArguments):
    """Add the `prompt` column (chat messages or plain text) and rename the answer/tests columns.

    >>> from datasets import Dataset
    >>> args = TrainScriptArguments(prompt_column="question", answer_column="gold", system_prompt="Be brief.")
    >>> row = prepare_dataset(Dataset.from_list([{"question": "1+1?", "gold": "2"}]), args)[0]
    >>> row["prompt"], row["answer"]
    ([{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '1+1?'}], '2')
    """
    columns = set(dataset.column_names)
    template = script_args.prompt_template
    if template is None and script_args.prompt_column not in columns:
        raise TrainError(
            f"prompt_column {script_args.prompt_column!r} is not a dataset column; columns: {sorted(columns)}"
        )
    for option in ("answer_column", "tests_column"):
        column = getattr(script_args, option)
        if column is not None and column not in columns:
            raise TrainError(f"{option} {column!r} is not a dataset column; columns: {sorted(columns)}")

    def to_prompt(row: dict) -> dict:
        if template is not None:
            try:
                text = template.format_map({key: _format_value(value) for key, value in row.items()})
            except KeyError as error:
                raise TrainError(f"prompt_template names {error}, which is not a column") from None
        else:
            text = _format_value(row[script_args.prompt_column])
        if script_args.use_chat_template:
            messages = [{"role": "system", "content": script_args.system_prompt}] if script_args.system_prompt else []
            return {"prompt": messages + [{"role": "user", "content": text}]}
        return {"prompt": f"{script_args.system_prompt}\n\n{text}" if script_args.system_prompt else text}

    # Drop an existing text `prompt` column first: a chat-format prompt cannot overwrite a string column in place.
    dataset = dataset.map(to_prompt, remove_columns=["prompt"] if "prompt" in columns else None)
    for column, target in ((script_args.answer_column, "answer"), (script_args.tests_column, "tests")):
        if column is not None and column != target:
            if target in dataset.column_names:
                dataset = dataset.remove_columns(target)
            dataset = dataset.rename_column(column, target)
    return dataset


# ---------------------------------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------------------------------


def _bitsandbytes_available() -> bool:
    return importlib.util.find_spec("bitsandbytes") is not None


def model_loading_kwargs(model_args: ModelConfig, training_args: DAPOConfig) -> dict[str, Any]:
    """Trainer keyword arguments for the model: `peft_config` (LoRA) and `quantization_config` (bitsandbytes).

    bitsandbytes is imported (checked) only when 4-bit or 8-bit loading is asked for. The model itself is loaded by
    TRL from `model_name_or_path` with `training_args.model_init_kwargs` (dtype, attention implementation, revision),
    so device placement under accelerate/DeepSpeed stays TRL's.
    """
    from trl import get_peft_config, get_quantization_config

    if model_args.load_in_4bit or model_args.load_in_8bit:
        if not _bitsandbytes_available():
            raise TrainError(
                "load_in_4bit/load_in_8bit needs bitsandbytes and a CUDA GPU: pip install 'trl-dapo-ext[quantization]'"
            )
        if training_args.use_cpu:
            raise TrainError("load_in_4bit/load_in_8bit needs a CUDA GPU; remove it or use_cpu")
        if not model_args.use_peft:
            raise TrainError("a quantized model can only be trained with an adapter: set use_peft: true (QLoRA)")
    init_kwargs = dict(
        revision=model_args.model_revision,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    init_kwargs = {key: value for key, value in init_kwargs.items() if value is not None}
    training_args.model_init_kwargs = {**init_kwargs, **(training_args.model_init_kwargs or {})}
    return dict(peft_config=get_peft_config(model_args), quantization_config=get_quantization_config(model_args))


def load_tokenizer(model_args: ModelConfig, training_args: DAPOConfig, script_args: TrainScriptArguments):
    """The model's tokenizer, left-padded as TRL's generation needs; checks a chat template exists when used."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        padding_side="left",
        truncation_side="left",
    )
    if script_args.use_chat_template and not getattr(tokenizer, "chat_template", None):
        raise TrainError(
            f"{model_args.model_name_or_path} has no chat template; set use_chat_template: false for a base model"
        )
    return tokenizer


# ---------------------------------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------------------------------


def train(script_args: TrainScriptArguments, training_args: DAPOConfig, model_args: ModelConfig) -> dict[str, Any]:
    """Build the trainer from parsed arguments, train, save, and return the run summary (also `train_summary.json`)."""
    import torch

    from trl_dapo_ext import DAPOTrainer

    if not model_args.model_name_or_path:
        raise TrainError("model_name_or_path is required (a hub id or a local folder written by save_pretrained)")
    reward_funcs = resolve_reward_funcs(script_args.reward_funcs)
    model_kwargs = model_loading_kwargs(model_args, training_args)
    tokenizer = load_tokenizer(model_args, training_args, script_args)
    dataset = load_train_dataset(script_args)

    trainer = DAPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=dataset,
        processing_class=tokenizer,
        **model_kwargs,
    )
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    wall = time.perf_counter() - started

    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json in output_dir, which `trl-dapo report` reads
    summary = _summary(trainer, result, wall, model_args)
    if trainer.accelerator.is_main_process:
        output = Path(training_args.output_dir)
        (output / "train_summary.json").write_text(json.dumps(summary, indent=2))
        print(json.dumps(summary, indent=2))
        if script_args.report:
            _draw_report(output)
    if hasattr(trainer, "end"):  # transformers >= 5.18: finish trackers, destroy the process group
        trainer.end()
    return summary


def _summary(trainer, result, wall: float, model_args: ModelConfig) -> dict[str, Any]:
    import torch

    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    steps = trainer.state.global_step
    summary: dict[str, Any] = dict(
        model=model_args.model_name_or_path,
        steps=steps,
        wall_s=round(wall, 2),
        steps_per_s=round(steps / wall, 4) if wall > 0 else None,
        train_loss=getattr(result, "training_loss", None),
        reward_first=rewards[0] if rewards else None,
        reward_last=rewards[-1] if rewards else None,
        device="cpu",
    )
    if torch.cuda.is_available() and not trainer.args.use_cpu:
        # Peak tensor memory of this process on its GPU (the trainer's; vLLM colocate's KV cache is allocated by
        # vLLM through the same allocator only in part, so `nvidia-smi` can show more).
        summary.update(
            device=torch.cuda.get_device_name(),
            peak_memory_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
            peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2),
        )
    return summary


def _draw_report(output: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        print("report skipped: matplotlib is not installed (a dependency of trl-dapo-ext: pip install matplotlib)")
        return
    from trl_dapo_ext.cli.report import ReportError, build_report

    try:
        report = build_report(output)
    except ReportError as error:
        print(f"report skipped: {error}")
        return
    print(f"report: {report.image}")


def main(argv: list[str] | None = None, prog: str = "trl-dapo train") -> int:
    """Run `trl-dapo train` with ``argv``; 0 on success, 2 on a recipe or input problem (one line on stderr)."""
    try:
        script_args, training_args, model_args = parse_args(argv, prog)
    except ValueError as error:
        # Config validation (DAPOConfig, TrainingArguments, an unknown YAML key) explains itself in one message.
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    try:
        train(script_args, training_args, model_args)
    except TrainError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
