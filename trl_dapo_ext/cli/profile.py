"""`trl-dapo profile`: how hard is the dataset for the model, at the group size G you plan to train with?

Samples completions for every prompt (G by default, ``--samples K >= G`` for sharper per-prompt estimates) with
the same sampling settings TRL's GRPOTrainer uses (temperature, top_p, top_k, min_p, repetition penalty,
max_completion_length; vLLM when it is installed and a GPU is present, transformers ``generate`` otherwise),
scores them with the reward functions, and reports:

* the pass-rate histogram (a completion passes when its summed reward is >= ``--pass-threshold``);
* the share of prompts whose group of G would be zero-variance (it teaches nothing): per prompt ``p^G + (1-p)^G``
  for binary rewards (estimated without bias from the K samples), measured on groups of G otherwise; the expected
  retention of dynamic sampling is one minus that share (``1 - p^G - (1-p)^G`` per prompt);
* what the refill planner (``trl_dapo_ext/dynamic_sampling/planner.py``) expects to generate per retained group,
  and its first round;
* completion lengths and the share truncated at max_completion_length.

It writes ``prompts.jsonl`` (per prompt: dataset index, pass rate, mean reward, mean length, zero-variance chance)
and ``summary.json`` to ``--output-dir``; ``--keep-band LOW HIGH`` also writes ``filtered.jsonl``, the dataset rows
whose pass rate is in the band (same columns as the input). A later run can start its prompt history from the table
(``dynamic_sampling_history_from: DIR/prompts.jsonl``), and ``trl-dapo estimate --profile DIR`` uses its lengths.

    trl-dapo profile --model Qwen/Qwen2.5-0.5B-Instruct --dataset data/train.jsonl --num-generations 8
    trl-dapo profile --config recipes/gsm8k_lora_1gpu.yaml --max-prompts 256 --keep-band 0.01 0.99

With ``--config`` the model, dataset, columns, system prompt, reward functions and sampling settings come from the
recipe; flags override them. Exit status: 0, or 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trl_dapo_ext.cpu_threads import parse_threads, set_cpu_threads
from trl_dapo_ext.preflight.difficulty import histogram, in_band, prompt_stats, summarize, write_table

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
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=None, metavar="RECIPE", help="take settings from a trl-dapo train recipe")
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

    file = Path(path).expanduser()
    if not file.is_file():
        raise ProfileError(f"recipe {path} does not exist")
    try:
        values = yaml.safe_load(file.read_text())
    except yaml.YAMLError as error:
        raise ProfileError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(values, dict):
        raise ProfileError(f"{path} must be a mapping of keys to values (a trl-dapo train recipe)")
    return values


# ---------------------------------------------------------------------------------------------------------------------
# Generation backends: prompt token ids in, K samples per prompt out.
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    ids: list[int]  # completion tokens up to and including the first EOS (what TRL keeps)
    truncated: bool  # no EOS within max_completion_length


def tokenize_prompts(tokenizer, prompts: Sequence[Any]) -> list[list[int]]:
    """Prompt token ids as TRL's GRPOTrainer makes them: the chat template with a generation prompt for messages,
    the tokenizer (with its special tokens) for text."""
    if prompts and isinstance(prompts[0], list):
        out = tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True, return_dict=True)[
            "input_ids"
        ]
        return [list(ids) for ids in out]
    return [list(ids) for ids in tokenizer(list(prompts))["input_ids"]]


def _eos_ids(tokenizer, model=None) -> list[int]:
    ids = {tokenizer.eos_token_id}
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in config_eos if isinstance(config_eos, list) else [config_eos]:
        ids.add(value)
    return sorted(i for i in ids if i is not None)


def _cut(ids: Sequence[int], eos: Sequence[int], max_length: int) -> Sample:
    ids = [int(i) for i in ids]
    for position, token in enumerate(ids):
        if token in eos:
            return Sample(ids[: position + 1], truncated=False)
    return Sample(ids[:max_length], truncated=True)


def transformers_generator(model, tokenizer, options) -> Callable[[list[list[int]], int], list[list[Sample]]]:
    """Sampling with ``model.generate`` and the generation kwargs TRL's GRPOTrainer builds."""
    import torch
    from transformers import GenerationConfig

    eos = _eos_ids(tokenizer, model)
    config = GenerationConfig(
        max_new_tokens=options.max_completion_length,
        do_sample=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=options.top_k,
        min_p=options.min_p,
        repetition_penalty=options.repetition_penalty,
    )
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]

    def generate(prompt_ids: list[list[int]], k: int) -> list[list[Sample]]:
        repeated = [ids for ids in prompt_ids for _ in range(k)]
        width = max(len(ids) for ids in repeated)
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in repeated], device=device)
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in repeated], device=device)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
        samples = [_cut(row[width:].tolist(), eos, options.max_completion_length) for row in out]
        return [samples[i * k : (i + 1) * k] for i in range(len(prompt_ids))]

    return generate


def vllm_generator(model_path: str, tokenizer, options) -> Callable[[list[list[int]], int], list[list[Sample]]]:
    """Sampling with vLLM's offline engine (``n=K`` samples per prompt, the same sampling settings)."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_path, seed=options.seed, dtype=options.dtype or "auto")
    eos = _eos_ids(tokenizer)

    def generate(prompt_ids: list[list[int]], k: int) -> list[list[Sample]]:
        params = SamplingParams(
            n=k,
            temperature=options.temperature,
            top_p=options.top_p,
            top_k=options.top_k if options.top_k and options.top_k > 0 else -1,
            min_p=options.min_p or 0.0,
            repetition_penalty=options.repetition_penalty,
            max_tokens=options.max_completion_length,
        )
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        return [
            [_cut(list(c.token_ids), eos, options.max_completion_length) for c in output.outputs] for output in outputs
        ]

    return generate


# ---------------------------------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------------------------------


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def score(
    rewards: Sequence[Callable], rows: Sequence[dict], completions: Sequence[Any], ids: Sequence[list[int]]
) -> list[float | None]:
    """Summed rewards (weight 1 each, None ignored as TRL's nansum does), one call per reward function."""
    prompts = [row["prompt"] for row in rows]
    columns = {key: [row[key] for row in rows] for key in rows[0] if key not in ("prompt", "completion")}
    totals: list[float | None] = [None] * len(completions)
    for reward in rewards:
        name = getattr(reward, "__name__", reward)
        try:
            values = reward(
                prompts=prompts,
                completions=list(completions),
                completion_ids=list(ids),
                trainer_state=None,
                log_extra=_noop,
                log_metric=_noop,
                **columns,
            )
        except Exception as error:  # noqa: BLE001 - the user's reward: one line (trl-dapo check-reward tests it)
            raise ProfileError(
                f"reward {name} raised: {type(error).__name__}: {error} (trl-dapo check-reward {name} tests it)"
            ) from error
        values = list(values)
        if len(values) != len(completions):
            raise ProfileError(f"reward {name} returned {len(values)} values for {len(completions)} completions")
        for i, value in enumerate(values):
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            totals[i] = (totals[i] or 0.0) + float(value)
    return totals


def profile_dataset(dataset, rewards, generate, tokenizer, options, progress=None):
    """Per-prompt statistics of ``dataset`` (already prepared: a ``prompt`` column) and the mean prompt length."""
    k = options.samples or options.num_generations
    stats, prompt_lengths = [], []
    for start in range(0, len(dataset), options.batch_prompts):
        rows = [dataset[i] for i in range(start, min(start + options.batch_prompts, len(dataset)))]
        prompt_ids = tokenize_prompts(tokenizer, [row["prompt"] for row in rows])
        prompt_lengths += [len(ids) for ids in prompt_ids]
        samples = generate(prompt_ids, k)
        flat = [s for group in samples for s in group]
        texts = tokenizer.batch_decode([s.ids for s in flat], skip_special_tokens=True)
        chat = isinstance(rows[0]["prompt"], list)
        completions = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
        repeated = [row for row in rows for _ in range(k)]
        totals = score(rewards, repeated, completions, [s.ids for s in flat])
        for j, group in enumerate(samples):
            stats.append(
                prompt_stats(
                    start + j,
                    totals[j * k : (j + 1) * k],
                    [len(s.ids) for s in group],
                    [s.truncated for s in group],
                    group_size=options.num_generations,
                    pass_threshold=options.pass_threshold,
                )
            )
        if progress is not None:
            progress(len(stats), len(dataset))
    return stats, sum(prompt_lengths) / max(len(prompt_lengths), 1)


# ---------------------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------------------


def _script_args(options):
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


def _validate(options) -> None:
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


def load_policy(options):
    """Tokenizer (left-padded, as TRL) and, for the transformers backend, the model on the GPU when there is one."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_dapo_ext.cli.train import TrainError, check_local_path

    try:
        check_local_path(options.model, "--model")
    except TrainError as error:
        raise ProfileError(str(error)) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(options.model, padding_side="left")
    except (OSError, ValueError) as error:
        raise ProfileError(f"cannot load the tokenizer of {options.model!r}: {error}") from None
    if options.use_chat_template and not getattr(tokenizer, "chat_template", None):
        raise ProfileError(f"{options.model} has no chat template; pass --use-chat-template false for a base model")
    backend = options.backend
    if backend == "auto":
        import importlib.util

        import torch

        backend = "vllm" if importlib.util.find_spec("vllm") and torch.cuda.is_available() else "transformers"
    if backend == "vllm":
        try:
            return tokenizer, vllm_generator(options.model, tokenizer, options), backend
        except ImportError:
            raise ProfileError("--backend vllm needs vLLM: pip install 'trl-dapo-ext[vllm]'") from None
    import torch

    try:
        model = AutoModelForCausalLM.from_pretrained(options.model, dtype=options.dtype or "auto")
    except (OSError, ValueError) as error:
        raise ProfileError(f"cannot load the model {options.model!r}: {error}") from None
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    return tokenizer, transformers_generator(model, tokenizer, options), backend


def write_filtered(dataset, indices: list[int], script, path: Path) -> None:
    """The chosen rows with the input's columns (the prompt and renamed columns restored), as JSON lines."""
    subset = dataset.select(indices)
    for column, target in ((script.answer_column, "answer"), (script.tests_column, "tests")):
        if column is not None and column != target:
            subset = subset.rename_column(target, column)
    if script.prompt_column == "prompt" and script.prompt_template is None:
        # prepare_dataset replaced the text prompt by messages (or prefixed the system prompt): undo it.
        prefix = f"{script.system_prompt}\n\n" if script.system_prompt and not script.use_chat_template else ""

        def restore(row: dict) -> dict:
            prompt = row["prompt"]
            text = prompt[-1]["content"] if isinstance(prompt, list) else prompt[len(prefix) :]
            return {"prompt": text}

        subset = subset.map(restore)
    else:
        subset = subset.remove_columns("prompt")
    subset.to_json(str(path), lines=True)


def main(argv: list[str] | None = None, prog: str = "trl-dapo profile") -> int:
    """Run `trl-dapo profile`; 0 on success, 2 on bad input (one line on stderr)."""
    from trl_dapo_ext.cli.errors import report_error

    debug = "--debug" in (argv or [])
    try:
        options = parse_options(argv, prog)
        print(run(options))
    except ProfileError as error:
        return report_error(prog, error, debug)
    return 0


def run(options) -> str:
    import torch

    from trl_dapo_ext.cli.check_reward import CheckError, resolve_reward
    from trl_dapo_ext.cli.train import TrainError, load_train_dataset

    _validate(options)
    try:
        rewards = [resolve_reward(name) for name in options.reward]
    except CheckError as error:
        raise ProfileError(str(error)) from None
    script = _script_args(options)
    try:
        dataset = load_train_dataset(script)
    except TrainError as error:
        raise ProfileError(str(error)) from None
    except (FileNotFoundError, ValueError, ConnectionError) as error:
        raise ProfileError(f"cannot load dataset {options.dataset!r}: {error}") from None
    if len(dataset) == 0:
        raise ProfileError(f"dataset {options.dataset!r} has no rows")
    threads = set_cpu_threads(getattr(options, "threads", "auto"))
    if threads is not None:
        print(f"threads: {threads.describe()}", file=sys.stderr)
    torch.manual_seed(options.seed)
    tokenizer, generate, backend = load_policy(options)
    k = options.samples or options.num_generations

    def progress(done: int, total: int) -> None:
        print(f"  {done}/{total} prompts", file=sys.stderr)

    print(
        f"profile: {len(dataset)} prompts x {k} samples with {backend}, G = {options.num_generations}", file=sys.stderr
    )
    stats, prompt_length = profile_dataset(dataset, rewards, generate, tokenizer, options, progress)
    summary = summarize(stats, options.num_generations, options.batch_groups)
    summary.update(
        mean_prompt_length=round(prompt_length, 2),
        max_completion_length=options.max_completion_length,
        backend=backend,
        threads=threads.as_dict() if threads is not None else None,
        model=str(options.model),
        dataset=str(options.dataset),
        rewards=[getattr(r, "__name__", str(r)) for r in rewards],
        sampling={name: getattr(options, name) for name in SAMPLING},
        pass_threshold=options.pass_threshold,
    )
    out = Path(options.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_table(out / "prompts.jsonl", stats)
    if options.keep_band is not None:
        kept = in_band(stats, *options.keep_band)
        summary.update(kept_band=list(options.keep_band), kept_prompts=len(kept))
        write_filtered(dataset, kept, script, out / "filtered.jsonl")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return format_summary(summary, out, stats)


def format_summary(summary: dict[str, Any], out: Path, stats) -> str:
    G = summary["group_size"]
    hist = histogram([s.pass_rate for s in stats])
    width = max(hist.values()) or 1
    lines = [
        f"{summary['prompts']} prompts x {summary['samples_per_prompt']} samples, G = {G}, "
        f"{'binary' if summary['binary_reward'] else 'graded'} reward; mean pass rate {summary['mean_pass_rate']:.3f}",
        "",
        "pass rate    prompts",
    ]
    lines += [f"  {label:<11} {count:5d} {'#' * round(30 * count / width)}" for label, count in hist.items()]
    lines += [
        "",
        f"zero-variance groups at G = {G}: {summary['zero_variance_share']:.1%} of prompts "
        f"(expected retention {summary['expected_retention']:.1%})",
        f"refill planner: retention {summary['planner_retention']:.3f}, "
        f"{summary['completions_per_retained_group']} completions per retained group; round 1 for "
        f"{summary.get('planner_first_round_groups')} groups ({summary['planner_first_round_completions']} "
        "completions) to fill a batch",
        f"completion length: mean {summary['mean_completion_length']:.1f} tokens, "
        f"{summary['truncated_share']:.1%} truncated at {summary['max_completion_length']}; "
        f"prompt length: mean {summary['mean_prompt_length']:.1f}",
        f"wrote {out / 'prompts.jsonl'} and {out / 'summary.json'}"
        + (f" and {out / 'filtered.jsonl'} ({summary['kept_prompts']} prompts)" if "kept_prompts" in summary else ""),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
