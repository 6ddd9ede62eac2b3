"""`trl-dapo estimate`: generated tokens per step and GPU memory per training process of a recipe, per common GPU.

Reads the model's shapes from its own config (``--model`` a local model folder or a ``config.json``; default the
recipe's ``model_name_or_path``: a local folder, the Hugging Face cache, or the built-in shapes of the recipes'
Qwen2.5 models) and the batch, LoRA, generation and dynamic-sampling settings from the recipe YAML. Prints each
memory component (weights, LoRA and optimizer state, activations, KV cache), the trainer's total, and fits / tight /
no for T4, L4, A100 40/80, H100 and H200; ``--num-processes N --zero-stage S`` divides the training state per process
as DeepSpeed ZeRO does. With ``--profile`` (the output folder of ``trl-dapo profile``) the
tokens per step use the measured mean completion and prompt lengths and the measured retention.

    trl-dapo estimate --config gsm8k_lora_1gpu
    trl-dapo estimate --config my_recipe.yaml --model path/to/config.json --profile runs/profile

These are planning estimates from shapes (formulas in docs/preflight.md), not measurements: confirm with a short
run (``train_summary.json`` records the measured peak). Exit status: 0, or 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from trl_dapo_ext.preflight.memory import GIB, GPUS, PUBLISHED, Estimate, ModelShape, Recipe, estimate


class EstimateError(ValueError):
    """Bad input, reported in one line (exit status 2)."""


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config", required=True, metavar="RECIPE", help="recipe YAML or shipped recipe name (as for trl-dapo train)"
    )
    parser.add_argument("--model", default=None, help="model folder or config.json (default: the recipe's model)")
    parser.add_argument(
        "--profile", default=None, help="trl-dapo profile output folder (or its summary.json): measured lengths"
    )
    parser.add_argument(
        "--prompt-length", type=int, default=None, help="prompt tokens (default: the profile's mean, else 256)"
    )
    parser.add_argument("--num-processes", type=int, default=1, help="training processes (GPUs), default 1")
    parser.add_argument(
        "--zero-stage", type=int, choices=[0, 1, 2, 3], default=0, help="DeepSpeed ZeRO stage (shards state)"
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the estimate as JSON")
    return parser


def _config_defaults() -> dict[str, Any]:
    """Field defaults of DAPOConfig and TRL's ModelConfig, without building either (no GPU checks run)."""
    from trl import ModelConfig

    from trl_dapo_ext.config import DAPOConfig

    defaults: dict[str, Any] = {}
    for cls in (ModelConfig, DAPOConfig):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
    return defaults


def read_recipe(path: str) -> dict[str, Any]:
    import yaml

    from trl_dapo_ext.recipes import RecipeNotFound, resolve_config

    try:
        file = resolve_config(path)  # a path, or the name of a shipped recipe
    except RecipeNotFound as error:
        raise EstimateError(str(error)) from None
    try:
        values = yaml.safe_load(file.read_text())
    except yaml.YAMLError as error:
        raise EstimateError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(values, dict):
        raise EstimateError(f"{path} must be a mapping of keys to values (a trl-dapo train recipe)")
    from trl_dapo_ext.cli.train.arguments import known_keys, unknown_key_error

    unknown = sorted(set(values) - set(known_keys()))
    if unknown:  # a misspelt key would be silently left at its default, as `trl-dapo train` refuses
        raise EstimateError(f"{path}: {unknown_key_error(unknown, 'recipe')}")
    return values


def load_shape(model: str | None, recipe: dict[str, Any]) -> ModelShape:
    """The model's shapes from a folder, a config.json, the Hugging Face cache or the built-in table."""
    name = model or recipe.get("model_name_or_path")
    if not name:
        raise EstimateError("the recipe has no model_name_or_path; give --model (a model folder or config.json)")
    path = Path(str(name)).expanduser()
    config = None
    if path.is_file():
        config = _read_json(path)
    elif path.is_dir():
        if not (path / "config.json").is_file():
            raise EstimateError(f"{path} has no config.json")
        config = _read_json(path / "config.json")
    else:
        _check_local(str(name), "--model" if model is not None else "model_name_or_path")
        try:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(str(name), local_files_only=True).to_dict()
        except (OSError, ValueError):
            config = PUBLISHED.get(str(name))
        if config is None:
            raise EstimateError(
                f"cannot read the config of {name!r} offline; give --model path/to/config.json "
                f"(built in: {', '.join(sorted(PUBLISHED))})"
            )
    try:
        return ModelShape.from_config(config, name=str(name))
    except (ValueError, TypeError) as error:
        raise EstimateError(f"{name}: {error}") from None


def _check_local(name: str, what: str) -> None:
    """A path that looks local and does not exist, said as `trl-dapo train` says it (with the command that makes the
    demo's model), before the Hugging Face cache is tried."""
    from trl_dapo_ext.cli.train.arguments import TrainError
    from trl_dapo_ext.cli.train.data import check_local_path

    try:
        check_local_path(name, what)
    except TrainError as error:
        raise EstimateError(str(error)) from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise EstimateError(f"cannot read {path}: {error}") from None
    if not isinstance(data, dict):
        raise EstimateError(f"{path} is not a JSON object")
    return data


def read_profile(path: str) -> dict[str, Any]:
    """The summary of a ``trl-dapo profile`` run (its folder or the summary.json file)."""
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "summary.json"
    if not file.is_file():
        raise EstimateError(f"no profile summary at {file}; run trl-dapo profile --output-dir first")
    summary = _read_json(file)
    for key in ("mean_completion_length", "mean_prompt_length", "expected_retention"):
        if key not in summary:
            raise EstimateError(f"{file} has no {key!r}: is it a trl-dapo profile summary?")
    return summary


def parameter_count(count: float) -> str:
    """A parameter count in the unit that keeps three significant digits readable.

    >>> parameter_count(1.5e9), parameter_count(135e6), parameter_count(482_000), parameter_count(512)
    ('1.500B', '135.0M', '482.0K', '512')
    """
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.{3 if unit == 'B' else 1}f}{unit}"
    return f"{count:.0f}"


def main(argv: list[str] | None = None, prog: str = "trl-dapo estimate") -> int:
    """Run `trl-dapo estimate`; 0 on success, 2 on bad input (one line on stderr)."""
    options = _parser(prog).parse_args(argv)
    try:
        print(run(options))
    except EstimateError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    return 0


def run(options) -> str:
    """The estimate of the recipe ``options.config`` as printed; also written as JSON with ``--json``."""
    values = read_recipe(options.config)
    shape = load_shape(options.model, values)
    profile = read_profile(options.profile) if options.profile else None
    if options.num_processes < 1:
        raise EstimateError(f"--num-processes must be >= 1, got {options.num_processes}")
    prompt_length = options.prompt_length
    if prompt_length is None:
        prompt_length = round(profile["mean_prompt_length"]) if profile else 256
    if prompt_length < 0:
        raise EstimateError(f"--prompt-length must be >= 0, got {prompt_length}")
    overrides = dict(prompt_length=prompt_length, num_processes=options.num_processes, zero_stage=options.zero_stage)
    try:
        recipe = Recipe.from_dict({**values, **overrides}, defaults=_config_defaults())
        result = estimate(
            shape,
            recipe,
            mean_completion_length=profile["mean_completion_length"] if profile else None,
            retention=profile["expected_retention"] if profile else None,
        )
    except (ValueError, TypeError) as error:
        raise EstimateError(f"{options.config}: {error}") from None
    lines = report_lines(shape, recipe, result, options.config, prompt_length)
    if options.json:
        write_json(options.json, shape, result)
    return "\n".join(lines)


def report_lines(shape: ModelShape, recipe: Recipe, result: Estimate, config: str, prompt_length: int) -> list[str]:
    """What estimate prints: the model and recipe, the memory per process, the verdict per GPU, tokens per step."""
    lines = [
        f"model {shape.name}: {parameter_count(shape.parameters())} parameters, {shape.layers} layers, "
        f"{shape.kv_heads} KV heads x {shape.head_dim}; KV cache {result.kv_per_position / 2**10:.1f} KiB per position",
        f"recipe {config}: {recipe.step_completions} completions per process per step "
        f"(G = {recipe.num_generations}), generation batch {recipe.generation_batch}, "
        f"{prompt_length} + {recipe.max_completion_length} tokens",
        "",
        "| per training process | GiB |",
        "|---|---:|",
    ]
    if recipe.num_processes > 1 or recipe.zero_stage:
        lines.insert(2, f"{recipe.num_processes} training processes, ZeRO-{recipe.zero_stage} (docs/memory.md)")
    lines += [f"| {name} | {gib:.2f} |" for name, gib in result.parts.items()]
    lines += [f"| total (x1.15 fragmentation + 0.8 GiB CUDA context) | {result.trainer_gib:.2f} |", ""]
    lines += ["| GPU | verdict (GiB) |", "|---|---|"]
    lines += [f"| {gpu} | {verdict} |" for gpu, verdict in result.verdicts.items()]
    lines += [
        "",
        f"generated per step: {result.attempted_completions_per_step:,.0f} completions, "
        f"{result.tokens_per_step:,.0f} tokens (all processes)",
    ]
    lines += [f"note: {note}" for note in result.notes]
    lines.append("Estimates from shapes, not measurements: confirm with a 20-step run (train_summary.json).")
    return lines


def write_json(path: str, shape: ModelShape, result: Estimate) -> None:
    """The estimate as JSON (``--json``): the parts in GiB, verdicts, the GPUs' memory, tokens per step, notes."""
    payload = dict(
        model=shape.name,
        parameters=shape.parameters(),
        kv_bytes_per_position=result.kv_per_position,
        parts_gib=result.parts,
        trainer_gib=result.trainer_gib,
        verdicts=result.verdicts,
        gpus_mib={gpu: mib for gpu, (mib, _) in GPUS.items()},
        tokens_per_step=result.tokens_per_step,
        completions_per_step=result.attempted_completions_per_step,
        notes=result.notes,
        gib=GIB,
    )
    Path(path).write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    sys.exit(main())
