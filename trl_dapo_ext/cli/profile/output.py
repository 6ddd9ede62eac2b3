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
    """What profile prints: the pass-rate histogram, then each quantity once, with its unit and, where estimated from
    the samples, its 95% interval; the planner's first round, lengths, the recommendation and the files."""
    G = summary["group_size"]
    hist = histogram([s.pass_rate for s in stats])
    width = max(hist.values()) or 1
    choice = summary.get("recommendation") or {}
    intervals = choice.get("intervals_95", {})
    lines = [
        f"{summary['prompts']} prompts x {summary['samples_per_prompt']} samples, G = {G}, "
        f"{'binary' if summary['binary_reward'] else 'graded'} reward; mean pass rate "
        f"{summary['mean_pass_rate']:.1%} of samples",
        "",
        "pass rate    prompts",
    ]
    lines += [f"  {label:<11} {count:5d} {'#' * round(30 * count / width)}" for label, count in hist.items()]
    lines += [
        "",
        f"zero-variance groups at G = {G}: {summary['zero_variance_share']:.1%} of groups"
        + _interval(intervals.get("zero_variance_share"), "{:.1%}"),
        *_cost_lines(choice),
        f"refill planner: round 1 generates {summary.get('planner_first_round_groups')} groups "
        f"({summary['planner_first_round_completions']} completions) to fill a batch",
        f"completion length: mean {summary['mean_completion_length']:.1f} tokens, "
        f"{summary['truncated_share']:.1%} of completions truncated at {summary['max_completion_length']} tokens; "
        f"prompt length: mean {summary['mean_prompt_length']:.1f} tokens",
        *_recommendation_lines(choice),
        f"wrote {out / 'prompts.jsonl'} and {out / 'summary.json'}"
        + (f" and {out / 'filtered.jsonl'} ({summary['kept_prompts']} prompts)" if "kept_prompts" in summary else ""),
    ]
    return "\n".join(lines)


def _interval(bounds: list[float] | None, form: str) -> str:
    return f" [{form.format(bounds[0])}, {form.format(bounds[1])}]" if bounds else ""


def _cost_lines(choice: dict[str, Any]) -> list[str]:
    """Each measured mode's expected completions per informative group, and screening's saving, with intervals."""
    costs, intervals = choice.get("completions_per_informative_group", {}), choice.get("intervals_95", {})
    if not costs:
        return []
    names = {"grpo": "GRPO, dynamic sampling off (refill generates the same full groups)"}
    lines = ["expected completions per informative group (95% intervals over the profiled prompts):"]
    for name, cost in costs.items():
        label = names.get(name, f"{name.replace('k=', 'with k = ')} probes at GRPO's budget")
        value = f"{cost:.1f} completions" if cost is not None else "none (no mixed group)"
        lines.append(f"  {label}: {value}" + _interval(intervals.get(name), "{:.1f}"))
    if choice.get("saving") is not None:
        lines.append(
            f"  screening's saving: {choice['saving']:.0%} of GRPO's completions per informative group"
            + _interval(intervals.get("saving"), "{:.0%}")
        )
    return lines


def _recommendation_lines(choice: dict[str, Any]) -> list[str]:
    """The recommended selection mode, its config fields, why, and what the threshold is (recommend.py)."""
    if not choice:
        return []
    fields = ", ".join(f"{key}={value!r}" for key, value in choice["config"].items())
    return [
        f"recommended: {choice['mode']} ({fields})",
        f"  why: {choice['reason']}",
        f"  note: {choice['threshold']}",
    ]
