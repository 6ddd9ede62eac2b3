"""The one declaration of every metric this package logs: its name, what it means, what a healthy value looks like.

``docs/metrics.md`` is generated from it (``python -m trl_dapo_ext.metric_names > docs/metrics.md``; a test fails
when the page is stale), and a test checks that a tiny training run logs exactly the names declared here for its
settings. Plain data, no torch or TRL import.

Code that logs or reads a metric takes its name from :data:`N` (``N.GROUPS_FRAC_MIXED``), never a typed string, so
a name is written exactly once, here.

Example:
    >>> metric("groups/frac_mixed").prefix
    'groups/'
    >>> N.GROUPS_PASS_AT_K, time_metric("generation", "frac")
    ('groups/pass@k', 'time/generation_frac')
    >>> sorted(expected_names(diagnostics=True, cuda=False))[:2]
    ['cost/generated_tokens_per_retained_group', 'cost/padded_token_frac']
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Literal

# When a metric is logged. Every name is also subject to its section's switch (diagnostics / dynamic_sampling).
Condition = Literal[
    "always", "overlong", "cuda", "planner", "cost", "skip", "screen", "pipeline", "beta", "vllm", "tools"
]

CONDITIONS: dict[Condition, str] = {
    "always": "every step",
    "overlong": "with `overlong_buffer_length` set",
    "cuda": "on a CUDA device only",
    "planner": "with the adaptive planner (`dynamic_sampling_oversample=None`)",
    "cost": "with the adaptive planner sizing rounds by cost (the default, `dynamic_sampling_confidence=None`)",
    "skip": "with `dynamic_sampling_skip_window > 0`",
    "screen": "with screening (`dynamic_sampling_screen_generations` set)",
    "pipeline": "with pipelined screening (`dynamic_sampling_pipeline=True`)",
    "beta": "with a KL penalty (`beta > 0`)",
    "vllm": "with vLLM generation (`use_vllm=True`)",
    "tools": "with tools (`tools=` passed to the trainer)",
}


@dataclass(frozen=True)
class Metric:
    """One logged metric: ``name`` as it appears in ``trainer_state.json``, its meaning and a healthy range."""

    name: str
    meaning: str
    healthy: str
    when: Condition = "always"

    @property
    def prefix(self) -> str:
        return self.name.split("/", 1)[0] + "/"


@dataclass(frozen=True)
class Section:
    """Metrics sharing a prefix and the config switch that turns them on."""

    title: str
    switch: str  # the config field that enables the section (documentation only)
    intro: str
    metrics: tuple[Metric, ...]


_TIME_SECTIONS = {
    "generation": "generating completions (transformers `generate` or vLLM)",
    "reward": "reward functions (verifiers)",
    "scoring": "the rest of the rollout: log-prob passes, padding, batch assembly, dynamic-sampling bookkeeping",
    "update": "forward, backward and optimizer step",
    "other": "the rest of the step (gradient clipping, logging, data loading): total minus the sections above",
}

SECTIONS: tuple[Section, ...] = (
    Section(
        "`groups/`: is the batch still informative?",
        "diagnostics",
        "Computed over every group attempted in the step (with dynamic sampling: all rounds, kept or discarded). "
        "The three `frac_*` values are fractions of the groups with at least one scorable member and sum to 1. "
        "`1 - groups/frac_mixed` equals TRL's `frac_reward_zero_std` only when every completion is scorable, the "
        'overlong penalty is off and `scale_rewards` is not `"batch"` (TRL tests the summed, shaped reward).',
        (
            Metric(
                "groups/frac_mixed",
                "share of groups with contrast (the groups dynamic sampling keeps)",
                "high; below 0.5 more than half of the generation teaches nothing",
            ),
            Metric(
                "groups/frac_all_max",
                "share of groups without contrast whose common reward is correct: all correct",
                "low early, rising as the model masters the data; above 0.5: the prompts are too easy",
            ),
            Metric(
                "groups/frac_all_min",
                "share of groups without contrast whose common reward is below the threshold: all wrong "
                "(a constant 0.5 counts here too)",
                "falling; above 0.5 from the start: prompts too hard, or a format/verifier mismatch",
            ),
            Metric(
                "groups/reward_std_mean",
                "mean over groups of the within-group task-reward std (divisor G-1; 0 for one scorable member)",
                "clearly above 0; for 0/1 rewards the maximum is about 0.5 (half right)",
            ),
            Metric(
                "groups/reward_std_p10",
                "10th percentile of the within-group std",
                "0 is normal (some groups lack contrast)",
            ),
            Metric(
                "groups/reward_std_p50",
                "median of the within-group std",
                "above 0; 0 means at least half the groups teach nothing",
            ),
            Metric("groups/reward_std_p90", "90th percentile of the within-group std", "above the median"),
            Metric(
                "groups/pass@1",
                "mean over groups of the share of correct samples (unbiased pass@1)",
                "rising",
            ),
            Metric(
                "groups/pass@k",
                "unbiased pass@k (Chen et al. 2021), `1 - C(n-c, k) / C(n, k)` per group with n >= k scorable "
                "samples; k = `diagnostics_pass_k` or G",
                "at or above pass@1; pass@1 rising while pass@k falls means the policy is losing diversity",
            ),
        ),
    ),
    Section(
        "`length/`: are completions running into the cap?",
        "diagnostics",
        "Over the update batch. `L_max = max_completion_length`, `L_cache = overlong_buffer_length` (DAPO Eq. 13); "
        "lengths are completion tokens including EOS, counted as TRL's `completions/*_length` count them: the "
        "model's own tokens (tool output excluded), truncated completions in full under `mask_truncated_completions`.",
        (
            Metric(
                "length/truncated_frac",
                "share of completions cut at `L_max` before EOS (same definition as TRL's "
                "`completions/clipped_ratio`)",
                "under 0.05-0.10; rising: the model rambles or `L_max` is too small",
            ),
            Metric(
                "length/task_accuracy",
                "share of scorable completions that are correct, before length shaping",
                "rising",
            ),
            Metric(
                "length/in_buffer_frac",
                "share with `L_max - L_cache < L <= L_max` (inside the soft-penalty zone)",
                "under 0.10-0.20; larger: the length penalty shapes a big part of the reward",
                "overlong",
            ),
            Metric(
                "length/overlong_penalty_mean",
                "mean overlong penalty over scorable completions, in `[-overlong_penalty_factor, 0]` (a completion "
                "no task reward scored gets none)",
                "close to 0",
                "overlong",
            ),
            Metric(
                "length/shaped_reward_mean",
                "mean of task reward + overlong penalty over scorable completions (what the advantages see)",
                "close to `length/task_accuracy`; a large gap means correct answers are punished for length",
                "overlong",
            ),
        ),
    ),
    Section(
        "`cost/`: what does a useful group cost?",
        "diagnostics",
        "Token and memory cost of the step.",
        (
            Metric(
                "cost/generated_tokens_per_retained_group",
                "completion tokens generated in the step (all rounds) per group that reached the update",
                "about G x mean length without dynamic sampling, that divided by the retention rate with it; "
                "growing fast: the data has saturated",
            ),
            Metric(
                "cost/useful_token_frac",
                "token positions the loss counts / all positions (prompt + completion, padding included) of the "
                "update batch",
                "as high as the task allows; prompts take their share",
            ),
            Metric(
                "cost/padded_token_frac",
                "padding positions / all positions of the update batch",
                "low; above 0.5: lengths vary widely and every row is padded to the longest",
            ),
            Metric(
                "cost/peak_memory_gb",
                "peak GPU memory allocated by tensors during the step, in GiB (2^30 bytes)",
                "flat over the run and below the device's capacity; creeping up: fragmentation or a leak",
                "cuda",
            ),
            Metric(
                "cost/memory_allocated_gb",
                "GPU memory still allocated by tensors at the end of the step, in GiB",
                "flat over the run; growing step after step: a leak",
                "cuda",
            ),
        ),
    ),
    Section(
        "`time/`: where does a step's wall time go?",
        "diagnostics",
        "Wall time of one optimizer step, split into sections; nested sections are charged to the innermost one, "
        "so the `_s` values add up to the step time and the `_frac` values to 1.",
        tuple(
            Metric(f"time/{name}_{unit}", f"{what}{' (seconds)' if unit == 's' else ' (share of the step)'}", healthy)
            for name, what in _TIME_SECTIONS.items()
            for unit, healthy in (
                ("s", "see the share"),
                (
                    "frac",
                    {
                        "generation": "usually the largest, 0.5-0.8 with long completions",
                        "reward": "under 0.2; above: a slow verifier (add workers or time limits)",
                        "scoring": "under the generation share",
                        "update": "the rest of the useful work",
                        "other": "small; large: overhead outside generation and the update",
                    }[name],
                ),
            )
        ),
    ),
    Section(
        "`dynamic_sampling/`: what did filling the batch take?",
        "dynamic_sampling",
        "Per step, summed over processes. `attempted = retained + discarded_surplus + zero_variance`.",
        (
            Metric(
                "dynamic_sampling/rounds",
                "generation rounds in the step, the first included: the step's generation calls (plain GRPO: 1)",
                "1-3; 1 with pipelined screening after the first step",
            ),
            Metric(
                "dynamic_sampling/attempted_groups",
                "full groups of G generated and scored (with screening: the completed prompts; a prompt dropped after "
                "its probes is no group)",
                "see retention",
            ),
            Metric(
                "dynamic_sampling/retained_groups",
                "informative groups in the update batch",
                "the batch's group count",
            ),
            Metric(
                "dynamic_sampling/discarded_surplus_groups",
                "informative groups beyond the batch, dropped (never carried to a later step)",
                "a few per step",
            ),
            Metric(
                "dynamic_sampling/zero_variance_groups",
                "groups whose filter reward did not vary (dropped)",
                "see `groups/frac_mixed`",
            ),
            Metric(
                "dynamic_sampling/all_max_groups",
                "zero-variance groups at the highest filter reward seen so far in the run",
                "see `groups/frac_all_max`",
            ),
            Metric(
                "dynamic_sampling/all_min_groups",
                "zero-variance groups at the lowest filter reward seen so far in the run",
                "see `groups/frac_all_min`",
            ),
            Metric(
                "dynamic_sampling/other_zero_variance_groups",
                "zero-variance groups at neither extreme (or unscorable): all-max + all-min + other = zero-variance",
                "0 with 0/1 verifiers",
            ),
            Metric(
                "dynamic_sampling/filled_groups",
                "uninformative groups masked into the batch when the budget ran out (`on_exhausted='fill'`)",
                "0",
            ),
            Metric(
                "dynamic_sampling/retention_rate",
                "retained / attempted groups (with screening, of the completed prompts only: the prompts dropped after "
                "their probes are in `dropped_prompts`)",
                "above 0.2",
            ),
            Metric(
                "dynamic_sampling/informative_rate",
                "(retained + discarded surplus) / attempted groups: the share of full groups whose reward varied "
                "(with screening, of the completed prompts only, so near 1 by design)",
                "at or above `retention_rate`; the quantity `expected_retention` estimates",
            ),
            Metric(
                "dynamic_sampling/generated_completions",
                "completions generated in the step, every round and process (attempted groups x G; with screening "
                "k x screened + (G - k) x completed prompts)",
                "about G x groups / retention",
            ),
            Metric(
                "dynamic_sampling/generation_seconds",
                "seconds of generation and scoring in the step's rounds (the slowest process's)",
                "about `realised_cost` x `seconds_per_completion`",
            ),
            Metric(
                "dynamic_sampling/expected_retention",
                "the planner's pooled estimate of `informative_rate` that the step was planned with (from earlier "
                "steps; the planner sizes rounds per prompt stratum, this is their pooled mean)",
                "close to `informative_rate` over recent steps (prompt skipping and strata shift the step's mix)",
                "planner",
            ),
            Metric(
                "dynamic_sampling/round_latency",
                "the fixed cost of one round the planner sized with, in completion-equivalents (set, or measured)",
                "close to `measured_round_latency` (else set `dynamic_sampling_round_latency` to it)",
                "planner",
            ),
            Metric(
                "dynamic_sampling/measured_round_latency",
                "the round latency fitted from this run's round times (the prior until rounds of several sizes)",
                "stable after a few dozen steps",
                "planner",
            ),
            Metric(
                "dynamic_sampling/seconds_per_completion",
                "the measured cost of one completion in a round (the fit's slope; NaN before the first round)",
                "stable; grows with completion length",
                "planner",
            ),
            Metric(
                "dynamic_sampling/realised_cost",
                "what the step's rounds cost: rounds x `round_latency` + completions (completion-equivalents)",
                "close to `expected_cost`",
                "planner",
            ),
            Metric(
                "dynamic_sampling/expected_cost",
                "the cost the planner expected to finish the step at round 1 (completion-equivalents)",
                "close to `realised_cost` on average",
                "cost",
            ),
            Metric(
                "dynamic_sampling/planned_fill_chance",
                "the chance, as planned, that round 1 fills the batch: the confidence the cost implies",
                "high when rounds are slow (large latency), low when they are cheap",
                "cost",
            ),
            Metric(
                "dynamic_sampling/screened_prompts",
                "prompts probed with `dynamic_sampling_screen_generations` completions",
                "about the batch's groups / `informative_rate`",
                "screen",
            ),
            Metric(
                "dynamic_sampling/completed_prompts",
                "screened prompts completed to a full group: those whose probes were mixed (as many as the batch "
                "misses, when filling it) and agreeing ones judged worth completing or explored",
                "at least `retained_groups`",
                "screen",
            ),
            Metric(
                "dynamic_sampling/dropped_prompts",
                "screened prompts not completed, each at its probes' cost: probes agreed and completing was not "
                "worth it, mixed beyond what the batch missed, or probed in the step's last round; screened = "
                "completed + dropped (pipelined: screened = completed - the previous step's carried_probes + dropped "
                "+ this step's carried_probes)",
                "falls as the data saturates less",
                "screen",
            ),
            Metric(
                "dynamic_sampling/stranded_probes",
                "prompts probed in the step's last round, which no round of the step can complete (counted in "
                "`dropped_prompts`; on several processes the rounds' equal size can force such probes)",
                "0 on one process",
                "screen",
            ),
            Metric(
                "dynamic_sampling/completions_per_informative_group",
                "generated completions / informative groups of the step (G at best; plain GRPO pays G / the "
                "informative share)",
                "close to G",
                "screen",
            ),
            Metric(
                "dynamic_sampling/carried_probes",
                "prompts whose probes this step's last call made and the next step completes (pipelined screening: "
                "mixed ones first, at most the batch's groups)",
                "about the batch's groups",
                "pipeline",
            ),
            Metric(
                "dynamic_sampling/carry_dropped_probes",
                "probes worth completing that the next step could not take: beyond the batch's groups, or from "
                "more than one step back (counted in `dropped_prompts`)",
                "near 0",
                "pipeline",
            ),
            Metric(
                "dynamic_sampling/stale_row_share",
                "share of the trained rows generated by the previous step's policy (carried probe rows, one step "
                "off-policy; their old log-probabilities are that policy's)",
                "k / G of the completed groups' rows after the first step",
                "pipeline",
            ),
            Metric(
                "dynamic_sampling/skipped_prompts",
                "refill prompts passed over because their last k groups were all right or all wrong",
                "grows as the data saturates",
                "skip",
            ),
            Metric(
                "dynamic_sampling/readmitted_prompts",
                "skippable prompts generated anyway (exploration floor)",
                "about `skip_floor` x (skipped + readmitted)",
                "skip",
            ),
            Metric(
                "dynamic_sampling/forced_prompts",
                "skippable prompts generated without a coin because the round's proposal limit was reached",
                "0; above 0: nearly every prompt looks zero-variance (too easy or too hard data)",
                "skip",
            ),
        ),
    ),
    Section(
        "`rewards/overlong_penalty/`: the length penalty as a reward column",
        "overlong_buffer_length",
        "DAPO's soft overlong punishment is one more reward column, summed into the reward before advantages; "
        "`rewards/<your task reward>/mean` stays unshaped.",
        (
            Metric(
                "rewards/overlong_penalty/mean",
                "mean penalty per completion",
                "close to 0",
                "overlong",
            ),
            Metric("rewards/overlong_penalty/std", "its std over completions", "small", "overlong"),
        ),
    ),
)

# TRL's own metrics that matter for DAPO runs (documented here, logged by TRL; not part of the exact-names check).
TRL_METRICS: tuple[Metric, ...] = (
    Metric("reward", "mean summed reward of the update batch", "rising"),
    Metric("reward_std", "std of the summed reward", "clearly above 0"),
    Metric("frac_reward_zero_std", "share of groups whose summed reward has zero std", "below 0.5"),
    Metric("completions/mean_length", "mean completion length of the update batch", "stable, below the cap"),
    Metric("completions/clipped_ratio", "share of truncated completions", "under 0.05-0.10"),
    Metric("completions/min_length", "shortest completion of the update batch", "not stuck at a tiny length"),
    Metric("completions/max_length", "longest completion of the update batch", "below the cap most of the time"),
    Metric("entropy", "mean token entropy of the policy", "above 0.3 x its first value"),
    Metric("clip_ratio/region_mean", "share of tokens whose ratio was clipped", "under 0.2"),
    Metric("clip_ratio/low_mean", "share of tokens clipped below `1 - epsilon` (negative advantages)", "small"),
    Metric("clip_ratio/high_mean", "share of tokens clipped above `1 + epsilon_high` (positive advantages)", "small"),
    Metric("kl", "KL to the reference", "steady growth, no jumps", "beta"),
    Metric("grad_norm", "gradient norm before clipping", "finite, no spikes"),
    Metric("loss", "the policy loss of the step", "finite; its level says little (advantages are centred)"),
    Metric("step_time", "seconds per training step", "stable"),
    Metric(
        "num_tokens",
        "running total of the prompt **and** completion tokens of every generation call, all processes (with "
        "dynamic sampling: every round's, discarded groups included)",
        "grows by about the step's generation cost",
    ),
    Metric(
        "sampling/importance_sampling_ratio/mean",
        "vLLM: mean ratio of the trainer's to vLLM's token probabilities (also `/min`, `/max`); with dynamic "
        "sampling, over every round of the step, discarded groups included",
        "close to 1",
        "vllm",
    ),
    Metric(
        "sampling/sampling_logp_difference/mean",
        "vLLM: mean absolute difference of the trainer's and vLLM's token log-probabilities (also `/max`); with "
        "dynamic sampling, over every round",
        "about 1e-3 (weights in sync)",
        "vllm",
    ),
    Metric(
        "tools/call_frequency",
        "tool calls per completion (also `tools/failure_frequency`); with dynamic sampling, over every round",
        "task-dependent",
        "tools",
    ),
)

OUR_PREFIXES: tuple[str, ...] = (
    "groups/",
    "length/",
    "cost/",
    "time/",
    "dynamic_sampling/",
    "rewards/overlong_penalty/",
)

ALL_METRICS: tuple[Metric, ...] = tuple(m for section in SECTIONS for m in section.metrics)
_DECLARED = frozenset(m.name for m in (*ALL_METRICS, *TRL_METRICS))


def _identifier(name: str) -> str:
    """``groups/pass@k`` -> ``GROUPS_PASS_AT_K``: the attribute of :data:`N` that holds a declared name."""
    return re.sub(r"\W+", "_", name.replace("@", "_at_")).strip("_").upper()


class _Names:
    """Every declared metric name as an attribute; an undeclared one raises ``AttributeError`` where it is used."""

    def __init__(self, metrics: tuple[Metric, ...]):
        self.__dict__.update({_identifier(m.name): m.name for m in metrics})

    def __getattr__(self, attribute: str) -> str:  # only called for a missing attribute
        raise AttributeError(f"no metric is declared as N.{attribute} in trl_dapo_ext/metric_names.py")


# The names of our metrics, N.GROUPS_FRAC_MIXED == "groups/frac_mixed" (one attribute per entry of ALL_METRICS).
N = _Names(ALL_METRICS)


def time_metric(section: str, unit: Literal["s", "frac"]) -> str:
    """The declared name of a ``time/`` section's seconds (``unit="s"``) or share of the step (``"frac"``)."""
    return getattr(N, _identifier(f"time/{section}_{unit}"))


def metric(name: str) -> Metric:
    """The declared metric called ``name``; a ``KeyError`` lists the prefixes when it is not one of ours."""
    for candidate in ALL_METRICS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"{name!r} is not a metric of trl_dapo_ext (prefixes: {', '.join(OUR_PREFIXES)})")


def declared(name: str) -> str:
    """``name`` itself when it is declared here (ours or one of TRL's listed in ``TRL_METRICS``), else a
    ``KeyError``. Code that reads logged metrics by name (``trl-dapo report``, the notebook helpers) passes every
    name through this, so a renamed or misspelt metric fails at import instead of silently dropping out.

    >>> declared("groups/pass@1"), declared("loss")
    ('groups/pass@1', 'loss')
    """
    if name not in _DECLARED:
        raise KeyError(f"{name!r} is not a declared metric (trl_dapo_ext/metric_names.py: SECTIONS or TRL_METRICS)")
    return name


def expected_names(
    *,
    diagnostics: bool = False,
    dynamic_sampling: bool = False,
    overlong: bool = False,
    cuda: bool = False,
    planner: bool = True,
    cost_aware: bool = True,
    skip: bool = False,
    screen: bool = False,
    pipeline: bool = False,
) -> set[str]:
    """The names a training step logs under these settings (``planner``/``cost_aware``/``skip`` matter only with
    sampling; ``cost_aware`` only with the planner)."""
    enabled = {"always", *(["overlong"] if overlong else []), *(["cuda"] if cuda else [])}
    if dynamic_sampling:
        enabled |= {*(["planner"] if planner else []), *(["skip"] if skip else []), *(["screen"] if screen else [])}
        enabled |= {"pipeline"} if pipeline else set()
        enabled |= {"cost"} if planner and cost_aware else set()
    on = {"diagnostics": diagnostics, "dynamic_sampling": dynamic_sampling, "overlong_buffer_length": overlong}
    return {m.name for s in SECTIONS if on[s.switch] for m in s.metrics if m.when in enabled}


def render_markdown() -> str:
    """The metrics reference page (``docs/metrics.md``)."""
    lines = [
        "<!-- Generated by `python -m trl_dapo_ext.metric_names > docs/metrics.md`; edit trl_dapo_ext/metric_names.py."
        " -->",
        "# Metrics reference",
        "",
        "Every metric the package logs, with what a healthy value looks like. Values are averaged over the logging "
        "window like TRL's own; a value that cannot be computed in a step (pass@k when no group has k scorable "
        "samples) is NaN for that step and left out of the average (`null` in `trainer_state.json` when a whole "
        "window has none). Metrics whose condition does not hold are not logged at all.",
        "",
        "Definitions: the *task reward* is the reward of your reward functions without the overlong penalty; a "
        "completion is *scorable* when at least one reward function returned a value; it is *correct* when its task "
        "reward is `>= diagnostics_success_threshold` (1.0 by default; e.g. 0.5 for graded rewards); a group has "
        "*contrast* when its scorable task rewards are not all equal (spread above 1e-6).",
        "",
        "`trl-dapo report OUTPUT_DIR` draws these metrics as one dashboard and warns when a value leaves its healthy "
        "range (see [Recipes](recipes.md#the-report)).",
    ]
    for section in SECTIONS:
        switch = (
            f"`{section.switch}` set" if section.switch == "overlong_buffer_length" else f"`{section.switch}=True`"
        )
        lines += ["", f"## {section.title}", "", f"Logged with {switch}. {section.intro}", ""]
        lines += _table(section.metrics, with_condition=True)
    lines += [
        "",
        "## TRL's own metrics that matter here",
        "",
        "Logged by TRL itself; listed for their healthy range. With dynamic sampling, `reward`, `reward_std`, "
        "`rewards/*`, `frac_reward_zero_std` and `completions/*` are recomputed on the update batch; the metrics "
        "TRL logs once per generation call (`num_tokens`, `sampling/*`, `tools/*` and the values a reward function "
        "logs with TRL's `log_metric`) cover every generation round of the step, discarded groups included.",
        "",
    ]
    lines += _table(TRL_METRICS, with_condition=True)
    return "\n".join(lines) + "\n"


def _table(metrics: tuple[Metric, ...], with_condition: bool) -> list[str]:
    head = "| metric | meaning | healthy |" + (" logged |" if with_condition else "")
    rule = "|---|---|---|" + ("---|" if with_condition else "")
    rows = [
        f"| `{m.name}` | {m.meaning} | {m.healthy} |" + (f" {CONDITIONS[m.when]} |" if with_condition else "")
        for m in metrics
    ]
    return [head, rule, *rows]


if __name__ == "__main__":
    sys.stdout.write(render_markdown())
