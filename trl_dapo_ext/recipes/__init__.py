"""The recipes shipped inside the package (as TRL ships ``trl/accelerate_configs``): YAML recipes for ``trl-dapo
train``, accelerate/DeepSpeed configs, and the small data files the CPU recipes train on.

A recipe is named by its file's stem (``tiny_cpu``), an accelerate config by ``accelerate/<stem>``
(``accelerate/zero2``). ``trl-dapo train --config NAME`` (and ``estimate``, ``profile``) takes a name where it takes
a path; ``trl-dapo recipes`` lists them, ``trl-dapo recipes copy NAME [DEST]`` copies one out for editing (with the
data file it trains on) and ``trl-dapo recipes path NAME`` prints where one is installed.

A relative ``dataset_name`` that does not exist from the working directory is looked up next to the recipe: the
shipped recipes say ``dataset_name: data/addition.jsonl`` and run from any directory, and so does a copy made by
``trl-dapo recipes copy``.

Nothing here imports torch, so listing the recipes is instant.

Example:
    >>> names()[:2]
    ['tiny_cpu', 'smollm2_cpu']
    >>> recipe_path("tiny_cpu").name, recipe_path("accelerate/zero2").parent.name
    ('tiny_cpu.yaml', 'accelerate')
    >>> resolve_config("tiny_cpu") == recipe_path("tiny_cpu")
    True
"""

from __future__ import annotations

import shutil
from pathlib import Path

RECIPES_DIR = Path(__file__).resolve().parent
"""The installed folder of the recipes (``trl_dapo_ext/recipes`` in a checkout, where ``recipes/`` links to it)."""

# name -> one line for `trl-dapo recipes` (tests/test_recipes.py checks that every shipped file has one).
DESCRIPTIONS: dict[str, str] = {
    "tiny_cpu": "the demo's tiny model on a CPU, under a minute (needs runs/demo/final: trl-dapo demo --quick)",
    "smollm2_cpu": "DAPO + LoRA on SmolLM2-135M-Instruct on a CPU (python -m trl_dapo_ext.models --link runs/smollm2)",
    "gsm8k_lora_1gpu": "GSM8K, Qwen2.5-0.5B-Instruct + LoRA, bf16, vLLM colocate, one GPU",
    "gsm8k_qlora_t4": "GSM8K, 4-bit QLoRA, fp16, transformers generation: a 16 GB T4",
    "multi_gpu_zero2_vllm_server": "GSM8K, Qwen2.5-1.5B on 3 GPUs (DeepSpeed ZeRO-2) with a vLLM server on a 4th",
    "accelerate/zero2": "DeepSpeed ZeRO-2: optimizer states and gradients sharded (bf16)",
    "accelerate/zero3": "DeepSpeed ZeRO-3: parameters sharded too (bf16)",
}


class RecipeNotFound(ValueError):
    """``--config`` names neither an existing file nor a shipped recipe (the message lists the names)."""


def names(accelerate: bool = False) -> list[str]:
    """The shipped recipes' names (with ``accelerate``: the accelerate configs' names), in the listing's order."""
    found = {path.stem for path in RECIPES_DIR.glob("*.yaml")}
    if accelerate:
        found = {f"accelerate/{path.stem}" for path in (RECIPES_DIR / "accelerate").glob("*.yaml")}
    order = list(DESCRIPTIONS)
    return sorted(found, key=lambda name: (order.index(name) if name in order else len(order), name))


def recipe_path(name: str) -> Path:
    """The installed file of the shipped recipe or accelerate config ``name`` (``.yaml`` optional)."""
    stem = name.removesuffix(".yaml").removesuffix(".yml")
    if stem in names() or stem in names(accelerate=True):
        return RECIPES_DIR / f"{stem}.yaml"
    raise RecipeNotFound(f"unknown recipe {name!r}; {_listing()}")


def _listing() -> str:
    return (
        f"the shipped recipes are {', '.join(names())} and the accelerate configs {', '.join(names(accelerate=True))} "
        "(trl-dapo recipes lists them)"
    )


def resolve_config(value: str) -> Path:
    """The recipe file ``--config value`` means: an existing file as given, else the shipped recipe of that name.

    >>> resolve_config("tiny_cpu.yaml") == recipe_path("tiny_cpu")  # unless ./tiny_cpu.yaml exists
    True
    >>> resolve_config("no_such_recipe")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trl_dapo_ext.recipes.RecipeNotFound: recipe no_such_recipe does not exist and names no shipped recipe; ...
    """
    path = Path(value).expanduser()
    if path.is_file():
        return path
    try:
        return recipe_path(value)
    except RecipeNotFound:
        pass
    hint = f" (did you mean --config {path.stem}?)" if path.stem in names() else ""
    raise RecipeNotFound(f"recipe {value} does not exist and names no shipped recipe{hint}; {_listing()}")


def resolve_data_path(value: str | None, recipe: Path) -> str | None:
    """``value`` (a recipe's ``dataset_name``) as given, or the file next to ``recipe`` when ``value`` is a relative
    path that does not exist from the working directory but does from the recipe's folder.

    >>> resolve_data_path("data/addition.jsonl", recipe_path("tiny_cpu")) == str(RECIPES_DIR / "data" / "addition.jsonl")
    True
    >>> resolve_data_path("openai/gsm8k", recipe_path("gsm8k_lora_1gpu"))
    'openai/gsm8k'
    """
    if not value or Path(value).expanduser().is_absolute() or Path(value).exists():
        return value
    beside = Path(recipe).parent / value
    return str(beside) if beside.exists() else value


def copy_recipe(name: str, destination: str | Path = ".", force: bool = False) -> list[Path]:
    """Copy the shipped recipe ``name`` to ``destination`` (a file name ending in ``.yaml`` or ``.yml``, else a
    folder, made if missing) for editing, and the data file it trains on (its ``dataset_name`` under ``data/``)
    beside it, so that the copy runs as it is. Returns the files written; refuses to overwrite a file that differs
    unless ``force``."""
    import yaml

    source = recipe_path(name)
    destination = Path(destination).expanduser()
    target = destination if destination.suffix in (".yaml", ".yml") else destination / source.name
    copies = [(source, target)]
    dataset = (yaml.safe_load(source.read_text()) or {}).get("dataset_name")
    if isinstance(dataset, str) and not Path(dataset).is_absolute() and (source.parent / dataset).is_file():
        copies.append((source.parent / dataset, target.parent / dataset))
    clashes = [str(to) for src, to in copies if to.exists() and to.read_bytes() != src.read_bytes()]
    if clashes and not force:
        raise FileExistsError(f"{', '.join(clashes)} already exists and differs (--force overwrites)")
    for src, to in copies:
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, to)
    return [to for _, to in copies]
