"""What ``trl-dapo profile`` writes besides its table: ``filtered.jsonl`` (the rows in ``--keep-band``), and the
summary it prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trl_dapo_ext.preflight.difficulty import histogram


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


def format_summary(summary: dict[str, Any], out: Path, stats) -> str:
    """What profile prints: the pass-rate histogram, the zero-variance share, the planner, lengths, the files."""
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
        *_recommendation_lines(summary.get("recommendation")),
        f"wrote {out / 'prompts.jsonl'} and {out / 'summary.json'}"
        + (f" and {out / 'filtered.jsonl'} ({summary['kept_prompts']} prompts)" if "kept_prompts" in summary else ""),
    ]
    return "\n".join(lines)


def _recommendation_lines(choice: dict[str, Any] | None) -> list[str]:
    """The recommended selection mode, its config fields and why (see trl_dapo_ext/preflight/recommend.py)."""
    if not choice:
        return []
    fields = ", ".join(f"{key}={value!r}" for key, value in choice["config"].items())
    costs = ", ".join(
        f"{name} {cost:.1f}" if cost is not None else f"{name} -"
        for name, cost in choice["completions_per_informative_group"].items()
    )
    return [
        f"recommended: {choice['mode']} ({fields})",
        f"  why: {choice['reason']}",
        f"  expected completions per informative group: {costs}",
    ]
