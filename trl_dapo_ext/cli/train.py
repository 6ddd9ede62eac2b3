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

Before the model loads, the recipe is checked and every problem is one line (exit status 2): a misspelt key (with
the closest known one), an unknown reward name, a dataset without the column a library reward grades against (and
the `answer_column` / `tests_column` that maps it), `use_vllm` without vLLM, a `max_completion_length` beyond the
model's context. Ctrl-C during training saves the model and trainer state in `output_dir/interrupted` and exits
with status 130.

After training the model (the LoRA adapter with `use_peft`) and `trainer_state.json` are saved in `output_dir`,
with `train_summary.json` (steps, wall time, steps/s, peak GPU memory) and, when matplotlib is installed, the
`trl-dapo report` dashboard (`report.png`, `report.txt`).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser

from trl_dapo_ext.cli.interrupts import INTERRUPTED_DIR, RunInterrupted, report_interrupt, save_on_interrupt
from trl_dapo_ext.config import DAPOConfig


def _attribute(module: str, name: str) -> Callable[[], Any]:
    return lambda: getattr(importlib.import_module(module), name)


# name in the YAML -> factory of the reward callable (each name is also an attribute of `reward_funcs`). Factories,
# so that naming one reward never imports (or starts worker pools for) the others.
REWARD_FUNCS: dict[str, Callable[[], Any]] = {
    name: _attribute("reward_funcs", name)
    for name in (
        "math_reward",
        "math_format_reward",
        "math_answer_format_reward",
        "code_reward",
        "code_reward_partial",
    )
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


HELP_DESCRIPTION = """\
Train a model with DAPO/GRPO from a YAML recipe. Every option below is both a recipe key and a flag; flags
override the recipe:

  trl-dapo train --config recipes/tiny_cpu.yaml                    # the demo's tiny model, under a minute on a CPU
  trl-dapo train --config recipes/gsm8k_lora_1gpu.yaml --max_steps 20 --output_dir runs/try

The options come in four groups: data and rewards (trl-dapo train's own), the DAPO extensions (DAPOConfig), the
model (trl.ModelConfig: model_name_or_path, dtype, LoRA, 4-bit), and last every trl.GRPOConfig /
transformers.TrainingArguments field (batch sizes, learning rate, generation, vLLM, logging, saving)."""

HELP_EPILOG = """\
After training, output_dir holds the model (or LoRA adapter), trainer_state.json, train_summary.json and the
report.png dashboard. Ctrl-C saves the model and trainer state in output_dir/interrupted and exits with status 130."""

# (title, dataclass, fields of a parent to leave out) of the help's groups, in order; the rest stays TRL's group.
_OWN_GROUPS: tuple[tuple[str, type, type | None], ...] = (
    ("data and rewards (trl-dapo train)", TrainScriptArguments, None),
    ("DAPO extensions (DAPOConfig; off by default)", DAPOConfig, GRPOConfig),
    ("model, LoRA and quantization (trl.ModelConfig)", ModelConfig, None),
)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each help text (HfArgumentParser's choice) and the description kept as written."""


def _field_names(cls: type, without: type | None = None) -> list[str]:
    skip = {f.name for f in fields(without)} if without is not None else set()
    return [f.name for f in fields(cls) if f.name not in skip]


def _group_help(parser: argparse.ArgumentParser) -> None:
    """Move our options into their own help groups, before TRL's and transformers' (argparse's group lists)."""
    groups = []
    for title, cls, without in _OWN_GROUPS:
        names = set(_field_names(cls, without))
        group = parser.add_argument_group(title)
        for action in parser._actions:
            if action.dest in names and action in parser._optionals._group_actions:
                parser._optionals._group_actions.remove(action)
                group._group_actions.append(action)
        groups.append(group)
    parser._optionals.title = "TRL GRPOConfig and transformers TrainingArguments options"
    others = [g for g in parser._action_groups if g not in groups and g is not parser._optionals]
    parser._action_groups[:] = [*others, *groups, parser._optionals]


def make_parser(prog: str | None = None) -> TrlParser:
    """The parser of `trl-dapo train`: `TrainScriptArguments`, `DAPOConfig` and TRL's `ModelConfig`.

    >>> script_args, training_args, model_args = make_parser().parse_args_and_config(
    ...     ["--config", "recipes/gsm8k_lora_1gpu.yaml", "--use_cpu", "true", "--bf16", "false", "--use_vllm", "false"]
    ... )  # doctest: +SKIP
    """
    parser = TrlParser(
        (TrainScriptArguments, DAPOConfig, ModelConfig),
        prog=prog,
        usage="%(prog)s --config RECIPE.yaml [--KEY VALUE ...]",
        description=HELP_DESCRIPTION,
        epilog=HELP_EPILOG,
        formatter_class=_HelpFormatter,
    )
    _group_help(parser)
    return parser


def known_keys() -> list[str]:
    """Every recipe key (and flag name) `trl-dapo train` knows, in the order of its dataclasses."""
    return [name for cls in (TrainScriptArguments, DAPOConfig, ModelConfig) for name in _field_names(cls)]


def _unknown_key_error(keys: list[str], source: str) -> TrainError:
    known = known_keys()
    dashes = "--" if source == "flag" else ""
    parts = []
    for key in keys:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        hint = f" (did you mean {dashes}{close[0]}?)" if close else ""
        parts.append(f"{dashes}{key}{hint}")
    noun = {"recipe": "recipe key", "flag": "flag"}[source] + ("" if len(keys) == 1 else "s")
    return TrainError(
        f"unknown {noun} {', '.join(parts)}: not a field of trl-dapo train, DAPOConfig, GRPOConfig or "
        "ModelConfig; trl-dapo train --help lists them all"
    )


def parse_args(argv: list[str] | None, prog: str | None = None):
    """Parse ``argv`` (``--config recipe.yaml`` and/or flags) into (script, training, model) arguments.

    A misspelt recipe key or flag is an error with the closest known name, not a silently ignored setting.
    """
    parser = make_parser(prog)
    *parsed, config_left, flags_left = parser.parse_args_and_config(
        argv, return_remaining_strings=True, separate_remaining_strings=True
    )
    if config_left:  # ["--key", "value", ...] for each recipe key no dataclass has
        raise _unknown_key_error([item[2:] for item in config_left[::2]], "recipe")
    if flags_left:
        names = [item.lstrip("-").split("=", 1)[0] for item in flags_left if item.startswith("-")]
        if not names:
            raise TrainError(f"unexpected arguments {flags_left}: options are --KEY VALUE pairs")
        raise _unknown_key_error(names, "flag")
    return tuple(parsed)


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
            raise TrainError("load_in_4bit/load_in_8bit needs bitsandbytes: pip install 'trl-dapo-ext[quantization]'")
        # 4-bit (NF4/FP4) also runs on a CPU with bitsandbytes' CPU backend (CI's backend lane: bitsandbytes 0.50.2);
        # 8-bit training on a CPU is not tested here.
        if model_args.load_in_8bit and training_args.use_cpu:
            raise TrainError("load_in_8bit is only supported on a CUDA GPU here; use load_in_4bit on a CPU")
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


def check_reward_columns(reward_funcs: list[Callable], column_names: list[str]) -> None:
    """Before the model loads: every library reward finds its dataset column (`answer`, `tests`, ...).

    A library reward (one with a ``columns`` attribute, as `math_reward` and `code_reward`) is called on zero
    completions with the dataset's columns, so the error is its own `MissingColumnError`, which names the
    ``answer_column`` / ``tests_column`` mapping. Other reward functions are not called.
    """
    from reward_funcs.inputs import MissingColumnError

    for func in reward_funcs:
        if getattr(func, "columns", None) is None:
            continue
        try:
            func([], **{column: [] for column in column_names})
        except MissingColumnError as error:
            raise TrainError(str(error)) from None


def check_generation_backend(training_args: DAPOConfig) -> None:
    """``use_vllm`` needs the vllm package: say so in one line before anything is loaded."""
    if training_args.use_vllm and importlib.util.find_spec("vllm") is None:
        raise TrainError(
            "use_vllm is true but vLLM is not installed: pip install 'trl-dapo-ext[vllm]' (a CUDA GPU), or set "
            "use_vllm: false (flag --use_vllm false) to generate with transformers"
        )


def check_context_length(model_args: ModelConfig, training_args: DAPOConfig) -> None:
    """The completion budget must fit in the model's context (``max_position_embeddings``), with room for a prompt.

    Past it the position embeddings run out: transformers only warns, and generation slows to a crawl or degrades.
    """
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            model_args.model_name_or_path,
            revision=model_args.model_revision,
            trust_remote_code=training_args.trust_remote_code,
        )
    except (OSError, ValueError):  # e.g. an adapter folder: loading the model will say what is wrong
        return
    context = getattr(config, "max_position_embeddings", None)
    budget = training_args.max_completion_length
    if isinstance(context, int) and budget is not None and budget >= context:
        raise TrainError(
            f"max_completion_length={budget} does not fit the model's context of {context} tokens "
            f"(max_position_embeddings of {model_args.model_name_or_path}), which must also hold the prompt: set "
            f"max_completion_length to {context} minus your longest prompt or less"
        )


def train(script_args: TrainScriptArguments, training_args: DAPOConfig, model_args: ModelConfig) -> dict[str, Any]:
    """Build the trainer from parsed arguments, train, save, and return the run summary (also `train_summary.json`).

    Everything that can be checked before the model loads is: reward names and their dataset columns, the vLLM
    backend, the completion budget against the model's context. Ctrl-C during training saves the model and trainer
    state into ``output_dir/interrupted`` and raises `RunInterrupted`.
    """
    import torch

    from trl_dapo_ext import DAPOTrainer

    if not model_args.model_name_or_path:
        raise TrainError("model_name_or_path is required (a hub id or a local folder written by save_pretrained)")
    reward_funcs = resolve_reward_funcs(script_args.reward_funcs)
    name = model_args.model_name_or_path
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().exists():
        raise TrainError(f"model_name_or_path {name} does not exist")
    check_generation_backend(training_args)
    model_kwargs = model_loading_kwargs(model_args, training_args)
    check_context_length(model_args, training_args)
    tokenizer = load_tokenizer(model_args, training_args, script_args)
    dataset = load_train_dataset(script_args)
    check_reward_columns(reward_funcs, dataset.column_names)

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
    with save_on_interrupt(trainer, os.path.join(training_args.output_dir, INTERRUPTED_DIR)):
        result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    wall = time.perf_counter() - started

    try:
        trainer.save_model(training_args.output_dir)
        trainer.save_state()  # trainer_state.json in output_dir, which `trl-dapo report` reads
    except KeyboardInterrupt:
        raise RunInterrupted(
            f"interrupted after training, while saving into {training_args.output_dir}: the files there may be "
            "incomplete",
            training_args.output_dir,
        ) from None
    summary = _summary(trainer, result, wall, model_args)
    if trainer.accelerator.is_main_process:
        output = Path(training_args.output_dir)
        (output / "train_summary.json").write_text(json.dumps(summary, indent=2))
        print(json.dumps(summary, indent=2))
        if script_args.report:
            try:
                _draw_report(output)
            except KeyboardInterrupt:
                raise RunInterrupted(
                    f"interrupted while drawing the report: the model and trainer state are saved in {output}",
                    str(output),
                ) from None
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
    """Run `trl-dapo train` with ``argv``; 0 on success, 2 on a recipe or input problem (one line on stderr), 130
    on Ctrl-C (after saving the model and trainer state of an interrupted run)."""
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
    except (RunInterrupted, KeyboardInterrupt) as error:
        # A bare KeyboardInterrupt comes from before training: loading the model, the tokenizer or the data.
        return report_interrupt(error, prog, nothing_saved="training had not started, nothing was saved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
