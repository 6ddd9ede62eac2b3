"""The recipe's vocabulary: `TrainScriptArguments`, the reward names a recipe may use, and the parser of
`trl-dapo train` (TRL's `TrlParser` over three dataclasses, options grouped in the help, misspelt keys caught)."""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser

from trl_dapo_ext import recipes
from trl_dapo_ext.config import DAPOConfig
from trl_dapo_ext.cpu_threads import parse_threads


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
answer; `math_answer_format_reward` only the anchored answer (both only for an answer that could be a value, never
a placeholder such as ``\\boxed{number}``); `code_reward_partial` gives the fraction of tests passed instead of 0/1."""


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
    threads: str = field(
        default="auto",
        metadata={
            "help": "torch CPU threads on a machine without a GPU: a number, or auto (the cores other processes leave "
            "free, measured before the model loads). Printed, and recorded in train_summary.json."
        },
    )


HELP_DESCRIPTION = """\
Train a model with DAPO/GRPO from a YAML recipe. Every option below is both a recipe key and a flag; flags
override the recipe:

  trl-dapo train --config tiny_cpu                      # a shipped recipe: the demo's tiny model, a minute on a CPU
  trl-dapo train --config my_recipe.yaml --max_steps 20 --output_dir runs/try
  trl-dapo recipes                                      # the shipped recipes; recipes copy NAME: one to edit

The options come in four groups: data and rewards (trl-dapo train's own), the DAPO extensions (DAPOConfig), the
model (trl.ModelConfig: model_name_or_path, dtype, LoRA, 4-bit), and last every trl.GRPOConfig /
transformers.TrainingArguments field (batch sizes, learning rate, generation, vLLM, logging, saving)."""

HELP_EPILOG = """\
After training, output_dir holds the model (or LoRA adapter), trainer_state.json, train_summary.json and the
report.png dashboard. Ctrl-C finishes the step, saves a full checkpoint (output_dir/checkpoint-N), prints the
command that resumes from it and exits with status 130."""

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
    ...     ["--config", "gsm8k_lora_1gpu", "--use_cpu", "true", "--bf16", "false", "--use_vllm", "false"]
    ... )  # doctest: +SKIP
    """
    parser = TrlParser(
        (TrainScriptArguments, DAPOConfig, ModelConfig),
        prog=prog,
        usage="%(prog)s --config RECIPE [--KEY VALUE ...]",
        description=HELP_DESCRIPTION,
        epilog=HELP_EPILOG,
        formatter_class=_HelpFormatter,
    )
    _group_help(parser)
    return parser


def known_keys() -> list[str]:
    """Every recipe key (and flag name) `trl-dapo train` knows, in the order of its dataclasses."""
    return [name for cls in (TrainScriptArguments, DAPOConfig, ModelConfig) for name in _field_names(cls)]


def unknown_key_error(keys: list[str], source: str) -> TrainError:
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
    ``--config`` takes a path or the name of a shipped recipe (`trl_dapo_ext.recipes`); a relative
    ``dataset_name`` of the recipe that does not exist from the working directory is looked up beside the recipe.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    recipe = None
    if "--config" in argv[:-1]:
        position = argv.index("--config") + 1
        try:
            recipe = recipes.resolve_config(argv[position])
        except recipes.RecipeNotFound as error:
            raise TrainError(str(error)) from None
        argv[position] = str(recipe)
    parser = make_parser(prog)
    *parsed, config_left, flags_left = parser.parse_args_and_config(
        argv, return_remaining_strings=True, separate_remaining_strings=True
    )
    if recipe is not None and not any(item.split("=", 1)[0] == "--dataset_name" for item in argv):
        parsed[0].dataset_name = recipes.resolve_data_path(parsed[0].dataset_name, recipe)
    if config_left:  # ["--key", "value", ...] for each recipe key no dataclass has
        raise unknown_key_error([item[2:] for item in config_left[::2]], "recipe")
    if flags_left:
        names = [item.lstrip("-").split("=", 1)[0] for item in flags_left if item.startswith("-")]
        if not names:
            raise TrainError(f"unexpected arguments {flags_left}: options are --KEY VALUE pairs")
        raise unknown_key_error(names, "flag")
    try:
        parse_threads(str(parsed[0].threads))
    except argparse.ArgumentTypeError as error:
        raise TrainError(f"threads: {error}") from None
    return tuple(parsed)
