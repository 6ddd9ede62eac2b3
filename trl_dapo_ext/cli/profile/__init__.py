"""`trl-dapo profile`: how hard is the dataset for the model, at the group size G you plan to train with?

Samples completions for every prompt (G by default, ``--samples K >= G`` for sharper per-prompt estimates) with
the same sampling settings TRL's GRPOTrainer uses (temperature, top_p, top_k, min_p, repetition penalty,
max_completion_length; vLLM when it is installed and a GPU is present, transformers ``generate`` otherwise),
scores them with the reward functions, and reports:

* the pass-rate histogram (a completion passes when its summed reward is >= ``--pass-threshold``);
* the share of groups of G that would be zero-variance (they teach nothing): per prompt ``p^G + (1-p)^G`` for
  binary rewards (estimated without bias from the K samples), measured on groups of G otherwise;
* the expected completions per informative group of GRPO (dynamic sampling off) and of screening at GRPO's budget
  with 4 probes, the one screening setting the equal-compute ablation measured, and screening's saving, each with a
  95% interval (trl_dapo_ext/preflight/recommend.py), and the mode to use (the 15% threshold on the saving is a
  setting, not a measured relation);
* the refill planner's first round (``trl_dapo_ext/dynamic_sampling/planner.py``);
* completion lengths and the share truncated at max_completion_length.

It writes ``prompts.jsonl`` (per prompt: dataset index, pass rate, mean reward, mean length, zero-variance chance)
and ``summary.json`` to ``--output-dir``; ``--keep-band LOW HIGH`` also writes ``filtered.jsonl``, the dataset rows
whose pass rate is in the band (same columns as the input). A later run can start its prompt history from the table
(``dynamic_sampling_history_from: DIR/prompts.jsonl``), and ``trl-dapo estimate --profile DIR`` uses its lengths.

    trl-dapo profile --model Qwen/Qwen2.5-0.5B-Instruct --dataset data/train.jsonl --num-generations 8
    trl-dapo profile --config gsm8k_lora_1gpu --max-prompts 256 --keep-band 0.01 0.99

With ``--config`` the model, dataset, columns, system prompt, reward functions and sampling settings come from the
recipe; flags override them. Exit status: 0, or 2 on bad input.
"""

# Modules, one job each: `arguments` (flags, recipe keys, checks), `sampling` (the policy and its generation backends),
# `scoring` (rewards and per-prompt statistics), `output` (filtered.jsonl and the printed summary); this module runs
# them in order and is the command.

from __future__ import annotations

import json
import sys
from pathlib import Path

from trl_dapo_ext.cpu_threads import set_cpu_threads
from trl_dapo_ext.preflight.difficulty import in_band, summarize, write_table

from .arguments import RECIPE_KEYS, SAMPLING, ProfileError, check_options, dataset_arguments, parse_options
from .output import format_summary, write_filtered
from .sampling import Sample, load_policy, tokenize_prompts, transformers_generator, vllm_generator
from .scoring import profile_dataset, score

__all__ = [
    "RECIPE_KEYS",
    "SAMPLING",
    "ProfileError",
    "Sample",
    "check_options",
    "dataset_arguments",
    "format_summary",
    "load_policy",
    "main",
    "parse_options",
    "profile_dataset",
    "run",
    "score",
    "tokenize_prompts",
    "transformers_generator",
    "vllm_generator",
    "write_filtered",
]


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
    """Profile the dataset as ``options`` say, write the table and summary (and filtered rows); the printed summary."""
    import torch

    from trl_dapo_ext.cli.check_reward import CheckError, resolve_reward
    from trl_dapo_ext.cli.train import TrainError, load_train_dataset

    check_options(options)
    try:
        rewards = [resolve_reward(name) for name in options.reward]
    except CheckError as error:
        raise ProfileError(str(error)) from None
    script = dataset_arguments(options)
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
