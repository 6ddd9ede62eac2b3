"""``trl-dapo profile``'s options: the flags, a recipe's keys (``--config``) as defaults under them, and the checks
that turn bad input into one line (`ProfileError`, exit status 2)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from typing import Any

from trl_dapo_ext.cpu_threads import parse_threads

# Recipe keys (trl-dapo train) -> this command's options.
RECIPE_KEYS = {
    "model_name_or_path": "model",
    "dataset_name": "dataset",
    "dataset_config": "dataset_config",
    "dataset_train_split": "split",
    "prompt_column": "prompt_column",
    "prompt_template": "prompt_template",
    "answer_column": "answer_column",
    "tests_column": "tests_column",
    "system_prompt": "system_prompt",
    "use_chat_template": "use_chat_template",
    "reward_funcs": "reward",
    "num_generations": "num_generations",
    "max_completion_length": "max_completion_length",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "seed": "seed",
    "dtype": "dtype",
}
SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_completion_length")


class ProfileError(ValueError):
    """Bad input, reported in one line (exit status 2)."""


def _grpo_default(name: str) -> Any:
    """TRL's GRPOConfig default of a sampling field, so profile samples exactly as training would."""
    from trl import GRPOConfig

    return {f.name: f.default for f in dataclasses.fields(GRPOConfig)}[name]


def _parser(prog: str) -> argparse.ArgumentParser:
    # The command's description is its package's docstring (imported by now: this module is imported from there).
    description = importlib.import_module(__package__).__doc__
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="RECIPE",
        help="take settings from a trl-dapo train recipe (a path or a shipped name)",
    )
    parser.add_argument("--model", default=None, help="model folder or hub id (the policy you will train)")
    parser.add_argument("--dataset", default=None, help="data file, save_to_disk folder or hub id")
    parser.add_argument("--dataset-config", default=None)
    parser.add_argument("--split", default="train")
    parser.add_argument("--prompt-column", default="prompt")
    parser.add_argument("--prompt-template", default=None, help="format string over the row's columns")
    parser.add_argument("--answer-column", default=None, help="gold column, passed to rewards as `answer`")
    parser.add_argument("--tests-column", default=None, help="unit-test column, passed to rewards as `tests`")
    parser.add_argument("--system-prompt", default=None)
    parser.add_argument(
        "--use-chat-template", type=_bool, default=True, help="prompts as chat messages (true) or plain text (false)"
    )
    parser.add_argument(
        "--reward", action="append", default=None, help="reward function (repeat for several; default math_reward)"
    )
    parser.add_argument("--num-generations", "-G", type=int, default=8, help="group size G you will train with")
    parser.add_argument("--samples", type=int, default=None, help="completions per prompt, >= G (default G)")
    parser.add_argument("--max-prompts", type=int, default=None, help="profile only the first N prompts")
    parser.add_argument("--max-completion-length", type=int, default=None)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--min-p", type=float, default=None)
    parser.add_argument("--repetition-penalty", type=float, default=None)
    parser.add_argument("--pass-threshold", type=float, default=1.0, help="summed reward that counts as a pass")
    parser.add_argument("--batch-groups", type=int, default=8, help="prompt groups per optimizer step (planner)")
    parser.add_argument("--backend", choices=["auto", "transformers", "vllm"], default="auto")
    parser.add_argument("--batch-prompts", type=int, default=16, help="prompts per generation call")
    parser.add_argument("--dtype", default=None, help="model dtype (default: the checkpoint's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=parse_threads,
        default="auto",
        help="torch CPU threads without a GPU: a number, or auto (the default: the cores other processes leave free)",
    )
    parser.add_argument("--output-dir", default="runs/profile", help="where prompts.jsonl and summary.json go")
    parser.add_argument(
        "--keep-band", nargs=2, type=float, metavar=("LOW", "HIGH"), help="write filtered.jsonl: pass rate in band"
    )
    parser.add_argument("--debug", action="store_true", help="on an error, also print its traceback")
    return parser


def _bool(text: str) -> bool:
    if str(text).lower() in ("1", "true", "yes"):
        return True
    if str(text).lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_options(argv: list[str] | None, prog: str) -> argparse.Namespace:
    """Flags, with a recipe's keys (``--config``) as defaults under them."""
    parser = _parser(prog)
    first = parser.parse_args(argv)
    flag_rewards = first.reward  # --reward flags replace the recipe's reward_funcs (not add to them)
    if first.config:
        recipe = _read_recipe(first.config)
        if isinstance(recipe.get("dataset_name"), str) and first.dataset is None:  # data beside the recipe
            from trl_dapo_ext.recipes import resolve_config, resolve_data_path

            recipe["dataset_name"] = resolve_data_path(recipe["dataset_name"], resolve_config(first.config))
        parser.set_defaults(**{RECIPE_KEYS[k]: v for k, v in recipe.items() if k in RECIPE_KEYS and v is not None})
        parser.set_defaults(reward=None)
        first = parser.parse_args(argv)
        rewards = recipe.get("reward_funcs")
        first.reward = flag_rewards or ([rewards] if isinstance(rewards, str) else rewards)
    for name in SAMPLING:
        if getattr(first, name) is None:
            setattr(first, name, _grpo_default(name))
    first.reward = first.reward or ["math_reward"]
    return first


def _read_recipe(path: str) -> dict[str, Any]:
    import yaml

    from trl_dapo_ext.recipes import RecipeNotFound, resolve_config

    try:
        file = resolve_config(path)  # a path, or the name of a shipped recipe
    except RecipeNotFound as error:
        raise ProfileError(str(error)) from None
    try:
        values = yaml.safe_load(file.read_text())
    except yaml.YAMLError as error:
        raise ProfileError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(values, dict):
        raise ProfileError(f"{path} must be a mapping of keys to values (a trl-dapo train recipe)")
    return values


def dataset_arguments(options):
    """The dataset options as `trl-dapo train`'s `TrainScriptArguments`, so profile loads and prompts as it does."""
    from trl_dapo_ext.cli.train import TrainScriptArguments

    return TrainScriptArguments(
        dataset_name=options.dataset,
        dataset_config=options.dataset_config,
        dataset_train_split=options.split,
        prompt_column=options.prompt_column,
        prompt_template=options.prompt_template,
        answer_column=options.answer_column,
        tests_column=options.tests_column,
        system_prompt=options.system_prompt,
        use_chat_template=options.use_chat_template,
        max_train_samples=options.max_prompts,
    )


def check_options(options) -> None:
    """Raises `ProfileError` for options profile cannot run with."""
    if not options.model:
        raise ProfileError("--model is required (or a recipe with model_name_or_path via --config)")
    if not options.dataset:
        raise ProfileError("--dataset is required (or a recipe with dataset_name via --config)")
    if options.num_generations < 2:
        raise ProfileError(
            f"--num-generations must be >= 2 (GRPO compares completions), got {options.num_generations}"
        )
    if options.samples is not None and options.samples < options.num_generations:
        raise ProfileError(f"--samples {options.samples} must be >= --num-generations {options.num_generations}")
    if options.max_prompts is not None and options.max_prompts < 1:
        raise ProfileError(f"--max-prompts must be >= 1, got {options.max_prompts}")
    if options.batch_prompts < 1 or options.batch_groups < 1:
        raise ProfileError("--batch-prompts and --batch-groups must be >= 1")
    if options.max_completion_length < 1 or not options.temperature > 0:
        raise ProfileError("--max-completion-length must be >= 1 and --temperature > 0 (profile samples)")
    if options.keep_band is not None:
        low, high = options.keep_band
        if not 0.0 <= low <= high <= 1.0:
            raise ProfileError(f"--keep-band needs 0 <= LOW <= HIGH <= 1, got {low} {high}")
