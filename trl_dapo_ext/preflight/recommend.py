"""Which group-selection mode to switch on for a dataset, from the completions `trl-dapo profile` sampled per prompt.

From each prompt's successes among its K sampled completions this module estimates the expected completions per
informative group (a group whose rewards differ, the only kind that carries a gradient) of the modes the
equal-compute ablation measured (docs/ablation.md), with the simulator's model (`benchmarks/rollout_efficiency.py`:
binary rewards, prompts drawn from the dataset, no prompt history):

* **plain GRPO** (dynamic sampling off), and DAPO's **refill**, which generates the same full groups and only drops
  the zero-variance ones afterwards: ``G / r``, with ``r`` the share of prompts whose group of G is mixed;
* **screening at GRPO's budget** with ``k = 4`` probes (`MEASURED_PROBES`, the one screening setting the ablation
  ran): ``k`` probes first, a full group only for the prompts that can teach; the least cost any k-probe rule reaches
  (the model of `dynamic_sampling.screening.probe_rule_bound`). Other probe counts were never measured in training,
  so they are never recommended.

**Estimates without plug-in bias.** Every cost above is a ratio of means over prompts of ``p^j`` and ``(1 - p)^j``
with ``j <= G``. From ``c`` successes in ``K >= G`` samples, ``C(c, j) / C(K, j)`` estimates ``p^j`` without bias
(the chance that ``j`` of the K samples, drawn without replacement, all passed), so each mean is unbiased and the
costs are consistent as prompts grow. Plugging ``c / K`` in for ``p`` is not: with ``K = G = 8`` it reads every
prompt with a mixed sample as mixed at G, and a true saving of 11% as about 20% (tests/test_recommend.py simulates
it). The 95% intervals are a bootstrap over prompts: resampling prompts resamples both which prompts were profiled
and their sampling noise. More prompts (``--max-prompts``) or samples (``--samples K``) narrow them.

The recommendation is screening at GRPO's budget (``dynamic_sampling_fixed_budget=True``: GRPO's completions and
optimizer steps, more informative groups per step) when its estimated saving reaches the threshold of the `Evidence`
in use, plain GRPO otherwise. The evidence says where the threshold comes from. The default, `STUDY`, is the
pre-registered study's measured relation between the saving predicted at a seed's warm start and the accuracy its
pipelined screening gained (`Evidence.from_relation`, from ``benchmarks/study.py profile-threshold``;
docs/ablation.md): it set no threshold, and its band of the gain lies within 2 points at every saving it measured
(3-17%), so at G = 8 the answer is "no measurable difference expected", with the gain the fit expects at the dataset's
saving; beyond those savings it is plain GRPO with "not determined". `SETTING` keeps the earlier rule, a 15% threshold
(`MIN_SAVING`, a setting). Refill is never the recommendation for a generation budget: at an equal number of
completions it trains on the same informative groups as GRPO in fewer, larger steps.

Example (five prompts never solved, five solved 4 times in 8; G = 8):
    >>> choice = recommend_mode([0] * 5 + [4] * 5, samples=8, group_size=8)
    >>> round(choice.costs["grpo"], 1), round(choice.costs["screening k=4"], 1), round(choice.saving, 2)
    (16.0, 12.1, 0.24)

    GRPO: half the groups are mixed, 8 / 0.5 = 16 completions each. Screening: a never-solved prompt costs its 4
    probes instead of 8, and a prompt at 4 of 8 costs 8 for its informative group: (5 x 4 + 5 x 8) / 5 = 12 per
    informative group, a little more since such a prompt's 4 probes can agree. A 24% saving lies beyond the savings
    the study measured, so its evidence gives no answer there; the 15% setting would recommend screening:

    >>> choice.mode, recommend_mode([0] * 5 + [4] * 5, samples=8, group_size=8, evidence=SETTING).mode
    ('plain GRPO', 'screening at GRPO budget')
    >>> recommend_mode([0] + [4] * 9, samples=8, group_size=8).mode  # a 4% saving, inside the study's range
    'no measurable difference expected'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# `SETTING`'s threshold: screening when it saves at least this share of GRPO's completions per informative group. A
# setting, not a measured relation; the default evidence is the study's (`STUDY`).
MIN_SAVING = 0.15
# The one probe count the equal-compute ablation trained with (arm 9: k = 4 of G = 8, at GRPO's budget).
MEASURED_PROBES = 4
SCREENING = f"screening k={MEASURED_PROBES}"
THRESHOLD_NOTE = (
    f"the {MIN_SAVING:.0%} threshold is a setting (trl_dapo_ext.preflight.recommend.MIN_SAVING), not a measured "
    "relation between the saving and accuracy"
)
NO_DIFFERENCE = "no measurable difference expected"
BOOTSTRAP_DRAWS = 1000
# Below this, a share of groups is rounding error of 1 - p^G - (1-p)^G: no group is mixed.
_NONE = 1e-12


@dataclass(frozen=True)
class Evidence:
    """What decides whether screening is recommended at a predicted saving, and where that comes from.

    ``threshold``: the least saving at which screening is recommended (None: never); ``answer``: what the evidence
    says where screening is not recommended for want of a threshold (`NO_DIFFERENCE`, or why it is undetermined);
    ``config``: the mode it covers; ``group_sizes``: the G it was measured at (None: any G that ``MEASURED_PROBES``
    divides, above it); ``fit``: the measured relation (`from_relation`), for the expected gain at a saving.
    """

    threshold: float | None
    note: str
    config: dict[str, Any]
    answer: str = ""
    group_sizes: tuple[int, ...] | None = None
    fit: dict[str, Any] | None = None

    @classmethod
    def from_relation(cls, relation: dict[str, Any], config: dict[str, Any], group_size: int) -> Evidence:
        """The evidence of a study's ``profile_threshold.json`` (benchmarks/study.py, protocol amendment 3): its
        threshold or answer, and its fit, for the mode ``config`` measured at ``group_size``."""
        fit = {**relation["fit"], "covered": list(relation["covered"])}
        low, high = relation["covered"]
        found = relation["answer"] if relation["threshold"] is None else f"threshold {relation['threshold']:.0%}"
        note = (
            f"from the study's {fit['n']} seeds (benchmarks/protocol.md), whose predicted savings ran {low:.0%}-"
            f"{high:.0%}: {found}"
        )
        return cls(relation["threshold"], note, config, relation["answer"], (group_size,), fit)

    def covers(self, group_size: int) -> bool:
        """Whether the evidence speaks for groups of ``group_size``."""
        if self.group_sizes is None:
            return group_size % MEASURED_PROBES == 0 and group_size > MEASURED_PROBES
        return group_size in self.group_sizes

    def gain_at(self, saving: float) -> tuple[float, float, float] | None:
        """The fit's mean accuracy gain at ``saving`` and its pointwise 95% band (None without a fit).

        >>> fit = dict(n=4, mean_saving=0.2, intercept_at_mean=0.01, slope=0.1, residual_sd=0.0, sxx=0.05, t=4.3)
        >>> Evidence(None, "", {}, fit=fit).gain_at(0.3)
        (0.02, 0.02, 0.02)
        """
        if self.fit is None:
            return None
        f = self.fit
        mean = f["intercept_at_mean"] + f["slope"] * (saving - f["mean_saving"])
        half = f["t"] * f["residual_sd"] * math.sqrt(1 / f["n"] + (saving - f["mean_saving"]) ** 2 / f["sxx"])
        return round(mean, 12), round(mean - half, 12), round(mean + half, 12)


FIXED_BUDGET_SCREENING = {
    "dynamic_sampling": True,
    "dynamic_sampling_screen_generations": MEASURED_PROBES,
    "dynamic_sampling_fixed_budget": True,
}
# The study's primary arm (benchmarks/ablation.py's arm 10): screening at GRPO's budget, one generation call a step.
PIPELINED_SCREENING = {**FIXED_BUDGET_SCREENING, "dynamic_sampling_pipeline": True}
# The 15% setting, the rule before the study: still there as `recommend_mode(..., evidence=SETTING)`.
SETTING = Evidence(MIN_SAVING, THRESHOLD_NOTE, FIXED_BUDGET_SCREENING)
# The pre-registered study's relation between the saving predicted at each seed's warm start and the gain of its
# primary pair, 20 seeds at G = 8 (benchmarks/protocol.md, amendment 3; benchmarks/results/study/profile_threshold.json,
# which tests/test_study.py checks this against; docs/ablation.md): no threshold, the band within 2 points.
STUDY_RELATION = {
    "fit": {
        "n": 20,
        "mean_saving": 0.067732150020766,
        "intercept_at_mean": 0.0031593749999999756,
        "slope": 0.025710808334687214,
        "residual_sd": 0.005457742675051006,
        "sxx": 0.024402985465080993,
        "t": 2.100922040241038,
    },
    "covered": [0.028764076886744205, 0.16748179592272516],
    "threshold": None,
    "answer": "no measurable difference expected",
}
STUDY = Evidence.from_relation(STUDY_RELATION, PIPELINED_SCREENING, group_size=8)
# The evidence `recommend_mode` uses by default.
EVIDENCE = STUDY


@dataclass(frozen=True)
class Recommendation:
    """The mode to use, the config fields that set it, why, and the estimates behind it.

    ``costs``: each measured mode's expected completions per informative group (``math.inf`` when no prompt can give
    one); ``intervals``: 95% bootstrap intervals of ``zero_variance_share``, each cost and ``saving`` (screening's
    share of GRPO's cost saved), where they could be estimated."""

    mode: str
    config: dict[str, Any]
    reason: str
    note: str = ""
    costs: dict[str, float] = field(default_factory=dict)
    zero_variance_share: float = 0.0
    saving: float | None = None
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)


def power_estimates(successes: Sequence[int], samples: Sequence[int], power: int) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt, unbiased estimates of ``p^power`` and ``(1 - p)^power`` from ``successes`` of ``samples`` draws.

    A prompt with fewer samples than ``power`` cannot form a group: it counts as never solved (``0`` and ``1``), as
    TRL would see no contrast in it.

    >>> [a.tolist() for a in power_estimates([3, 0], [4, 4], 2)]
    [[0.5, 0.0], [0.0, 1.0]]
    """
    high = [math.comb(c, power) / math.comb(n, power) if n >= power else 0.0 for c, n in zip(successes, samples)]
    low = [math.comb(n - c, power) / math.comb(n, power) if n >= power else 1.0 for c, n in zip(successes, samples)]
    return np.asarray(high, dtype=float), np.asarray(low, dtype=float)


def _costs(means: np.ndarray, probes: int, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """GRPO's and screening's completions per informative group from the means of ``p^k, (1-p)^k, p^G, (1-p)^G``
    (last axis; any leading axes are bootstrap draws): `probe_rule_bound`'s four rules, on estimated moments."""
    high_k, low_k, high_g, low_g = np.moveaxis(means, -1, 0)
    retention = 1.0 - high_g - low_g
    mixed = 1.0 - high_k - low_k  # probes that differ: always completed
    rest = group_size - probes
    # Agreeing prompts of each direction are completed all or none (a ratio objective is optimal at a vertex):
    # (completed share of agreeing prompts, informative groups they give) per option; both directions = GRPO.
    options = ((0.0, 0.0), (high_k, high_k - high_g), (low_k, low_k - low_g), (high_k + low_k, retention - mixed))
    with np.errstate(divide="ignore", invalid="ignore"):
        grpo = np.where(retention > _NONE, group_size / retention, np.inf)
        best = np.full(np.shape(retention), np.inf)
        for agree, gain in options:
            informative = mixed + gain
            best = np.minimum(
                best, np.where(informative > _NONE, (probes + rest * (mixed + agree)) / informative, np.inf)
            )
    return grpo, best


def estimate_costs(
    successes: Sequence[int], samples: Sequence[int], group_size: int, probes: int = MEASURED_PROBES, seed: int = 0
) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Point estimates of the zero-variance share, GRPO's and screening's completions per informative group and the
    saving, and their 95% bootstrap intervals over prompts (see the module docstring)."""
    columns = [*power_estimates(successes, samples, probes), *power_estimates(successes, samples, group_size)]
    table = np.stack(columns, axis=1)  # prompts x 4
    draws = np.random.default_rng(seed).integers(0, len(table), size=(BOOTSTRAP_DRAWS, len(table)))
    resampled = table[draws].mean(axis=1)  # draws x 4
    values, intervals = {}, {}
    for means, out in ((table.mean(axis=0), values), (resampled, intervals)):
        grpo, screening = _costs(means, probes, group_size)
        with np.errstate(divide="ignore", invalid="ignore"):
            saving = np.where(np.isfinite(grpo), 1.0 - screening / grpo, 0.0)
        out.update(
            {
                "zero_variance_share": means[..., 2] + means[..., 3],
                "grpo": grpo,
                SCREENING: screening,
                "saving": saving,
            }
        )
    points = {name: float(value) for name, value in values.items()}
    # The draws' own values as bounds (no interpolation: a cost can be infinite in a draw without mixed groups).
    bounds = {
        name: (float(np.percentile(draw, 2.5, method="lower")), float(np.percentile(draw, 97.5, method="higher")))
        for name, draw in intervals.items()
    }
    return points, bounds


def recommend_mode(
    successes: Sequence[int],
    samples: Sequence[int] | int,
    group_size: int,
    binary: bool = True,
    evidence: Evidence | None = None,
) -> Recommendation:
    """The selection mode for prompts with these ``successes`` out of ``samples`` each (one count for all, or one
    per prompt; each ``>= group_size``) at group size ``group_size`` (see the module docstring).

    ``binary``: whether the reward is right/wrong; the screening model assumes it, so a graded reward gets plain
    GRPO with a note. ``evidence``: what decides (default `EVIDENCE`).
    """
    evidence = EVIDENCE if evidence is None else evidence
    counts = _checked_counts(successes, samples, group_size)
    points, intervals = estimate_costs(*counts, group_size)
    measurable = evidence.covers(group_size)
    # Only what the model covers: screening's figures where its measured k fits G, nothing but the share for a
    # graded reward (the pass counts are then not the rewards the groups would differ in).
    shown = ("zero_variance_share",) + (("grpo",) + ((SCREENING, "saving") if measurable else ()) if binary else ())
    costs = {name: points[name] for name in shown if name in ("grpo", SCREENING)}
    estimate = dict(
        costs=costs,
        zero_variance_share=points["zero_variance_share"],
        intervals={name: intervals[name] for name in shown},
        note=evidence.note,
    )
    off = {"dynamic_sampling": False}
    if not math.isfinite(points["grpo"]):
        reason = (
            f"no prompt gives a mixed group at G = {group_size} (every group is all right or all wrong): no method "
            "learns from these prompts; keep prompts the model sometimes solves (`trl-dapo profile --keep-band 0.01 "
            "0.99`) or start from a stronger model"
        )
        return Recommendation("no mode can help", off, reason, **estimate)
    if not binary:
        reason = (
            "the reward is graded: the screening model assumes right/wrong rewards; measure "
            "`dynamic_sampling/completions_per_informative_group` in a short screening run before switching it on"
        )
        return Recommendation("plain GRPO", off, reason, **estimate)
    if not measurable:
        where = (
            f"needs G a multiple of {MEASURED_PROBES} above it"
            if evidence.group_sizes is None
            else f"at G = {', '.join(map(str, evidence.group_sizes))}"
        )
        reason = (
            f"screening was measured with k = {MEASURED_PROBES} probes only, {where} (G = {group_size}); leave "
            "dynamic sampling off"
        )
        return Recommendation("plain GRPO", off, reason, **estimate)
    return _screening_or_not(points, intervals["saving"], group_size, estimate, evidence)


def _checked_counts(
    successes: Sequence[int], samples: Sequence[int] | int, group_size: int
) -> tuple[list[int], list[int]]:
    """``successes`` and per-prompt ``samples`` as int lists; a clear error for counts no estimate can use."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 (a group of 1 never has contrast), got {group_size}")
    successes = [int(c) for c in successes]
    if not successes:
        raise ValueError("no prompts: profile at least one prompt")
    samples = [int(samples)] * len(successes) if isinstance(samples, int) else [int(n) for n in samples]
    if len(samples) != len(successes) or any(not 0 <= c <= n for c, n in zip(successes, samples)):
        raise ValueError("need one sample count per prompt and 0 <= successes <= samples")
    if max(samples) < group_size:
        raise ValueError(f"need at least G = {group_size} samples per prompt to estimate a group's chances")
    return successes, samples


def _screening_or_not(
    points: dict[str, float],
    saving_interval: tuple[float, float],
    group_size: int,
    estimate: dict[str, Any],
    evidence: Evidence,
) -> Recommendation:
    """Screening when its estimated saving reaches the evidence's threshold; plain GRPO, or the evidence's answer,
    otherwise."""
    saving, (low, high) = points["saving"], saving_interval
    said = (
        f"screening with k = {MEASURED_PROBES} probes would save an estimated {saving:.0%} [{low:.0%}, {high:.0%}] "
        f"of GRPO's completions per informative group at G = {group_size}"
    )
    gain = evidence.gain_at(saving)
    covered = True
    if gain is not None:
        said += f"; at that saving the study's fit expects a gain of {100 * gain[0]:+.1f} [{100 * gain[1]:+.1f}, "
        said += f"{100 * gain[2]:+.1f}] points of held-out accuracy"
        low_covered, high_covered = evidence.fit["covered"]  # a gain implies a fit
        covered = low_covered <= saving <= high_covered
        if not covered:
            said += " (outside the savings it measured, an extrapolation)"
    off = {"dynamic_sampling": False}
    threshold = evidence.threshold
    if threshold is None and not covered:
        # The study's answer speaks for the savings it measured only.
        reason = f"{said}; the study set no threshold and measured savings of {low_covered:.0%}-{high_covered:.0%} "
        reason += "only: not determined for this saving; leave dynamic sampling off, or compare pipelined screening "
        reason += "with it off on your task (docs/choosing.md)"
        return Recommendation("plain GRPO", off, reason, saving=saving, **estimate)
    if threshold is None:
        # No saving from which the band stays above 0 up to the largest saving measured (amendment 3's threshold).
        mode = NO_DIFFERENCE if evidence.answer == NO_DIFFERENCE else "plain GRPO"
        size = "within 2 points" if mode == NO_DIFFERENCE else "not bounded within 2 points"
        reason = f"{said}; the study set no threshold: its band of the gain does not stay above 0 up to the largest "
        reason += f"saving it measured, and is {size} wherever it measured ({evidence.answer}); leave dynamic "
        reason += "sampling off"
        if mode == NO_DIFFERENCE:  # the recipes' mode generates no more than off does and was not measured worse
            reason += ", or keep pipelined screening at GRPO's budget (the recipes' mode): at equal generation the "
            reason += "study found the two within a fraction of a point"
        return Recommendation(mode, off, reason, saving=saving, **estimate)
    unsure = (
        f"; the interval includes {threshold:.0%}: more prompts or samples would settle it"
        if low < threshold <= high
        else ""
    )
    if saving < threshold:
        reason = f"{said}, below {threshold:.0%}{unsure}; leave dynamic sampling off"
        return Recommendation("plain GRPO", off, reason, saving=saving, **estimate)
    reason = (
        f"{said}{unsure}. At GRPO's budget it keeps GRPO's completions and optimizer steps and trains on more "
        "informative groups per step; compare it with dynamic sampling off on your task (docs/choosing.md)"
    )
    return Recommendation("screening at GRPO budget", dict(evidence.config), reason, saving=saving, **estimate)
