"""What the advantage estimators estimate: exact expectations by enumeration, for ``docs/estimators.md``.

Every number here is an exact expectation over *every* group a small policy can sample (no sampling noise), with the
advantages computed by the package's own `trl_dapo_ext.group_advantages` and groups filtered by the dynamic-sampling
filter `trl_dapo_ext.filtering.informative_groups`, the functions the trainer calls.

* ``expected_gradient``: ``E[(1/G) sum_i A_i grad log pi(Y_i)]`` for a softmax policy over a few responses, the
  unclipped full-sequence score estimator of the GRPO note (seed ``004``, Secs. 2-3), against ``true_gradient``, the
  gradient of the expected reward ``V = sum_j pi_j r_j``.
* ``mixed_group_probability``: the chance that a binary-reward group passes the filter, from all ``2**G`` outcomes.
* ``accepted_law``: the prompt distribution dynamic sampling actually trains on.

Run ``python docs/scripts/estimators.py`` from the repository root to rewrite ``docs/estimators_table.md`` and
``docs/estimators_mixed_groups.png``; ``--check`` only compares the table (``tests/test_fidelity.py`` does the same
and fails when the committed table is stale).

Example:
    >>> uniform, rewards = torch.zeros(3, dtype=torch.float64), torch.tensor([0.0, 1.0, 10.0], dtype=torch.float64)
    >>> relation(expected_gradient(uniform, rewards, 2, "grpo", "none"), true_gradient(uniform, rewards))
    (0.5, 0.0)
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

import torch

from trl_dapo_ext import group_advantages
from trl_dapo_ext.filtering import informative_groups

DOCS = Path(__file__).resolve().parents[1]
TABLE_PATH = DOCS / "estimators_table.md"
PLOT_PATH = DOCS / "estimators_mixed_groups.png"

# The stabiliser DAPOTrainer (like TRL) adds to the standard deviation: the table shows what a user's run computes.
TRAINER_EPS = 1e-4

# (estimator, scale_rewards, reward_std); reward_std is irrelevant when scale_rewards="none".
SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("grpo", "none", "-"),
    ("loo", "none", "-"),
    ("grpo", "group", "sample"),
    ("grpo", "group", "population"),
    ("loo", "group", "sample"),
    ("loo", "group", "population"),
    ("grpo", "batch", "sample"),
    ("loo", "batch", "sample"),
)
# Two small cases: the GRPO note's counterexample, and a binary verifier reward on a non-uniform policy.
CASES: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "counterexample: pi = (1/3, 1/3, 1/3), rewards (0, 1, 10)": ((1 / 3, 1 / 3, 1 / 3), (0.0, 1.0, 10.0)),
    "binary: pi = (0.5, 0.3, 0.2), rewards (1, 0, 0)": ((0.5, 0.3, 0.2), (1.0, 0.0, 0.0)),
}
GROUP_SIZES = (2, 4)
BATCH_GROUPS = 2  # scale_rewards="batch" rows: two groups of the same prompt share one batch standard deviation
MIXED_GROUP_SIZES = (4, 8, 16)
MIXED_PROBABILITIES = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
# Dynamic sampling's accepted law: seven prompts, equally likely in the dataset, from unsolvable to always solved.
PROMPT_SUCCESS = (0.0, 0.02, 0.1, 0.3, 0.5, 0.9, 1.0)
ACCEPTED_GROUP_SIZE = 8


def true_gradient(logits: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """Gradient of ``V(theta) = sum_j softmax(theta)_j r_j`` with respect to the logits ``theta``."""
    theta = logits.detach().double().clone().requires_grad_(True)
    value = (torch.softmax(theta, dim=0) * rewards.double()).sum()
    return torch.autograd.grad(value, theta)[0]


def expected_gradient(
    logits: torch.Tensor,
    rewards: torch.Tensor,
    num_generations: int,
    estimator: str,
    scale: str,
    std: str = "sample",
    eps: float = TRAINER_EPS,
    groups: int = 1,
) -> torch.Tensor:
    """Exact ``E[(1/(B G)) sum_i A_i grad log pi(Y_i)]`` over every batch of ``B = groups`` iid groups of ``G``.

    ``A_i`` comes from `group_advantages` with the given estimator and scaling, the rewards and sampling
    probabilities are held fixed (as in the trainer, where they are computed without gradients), and only
    ``log pi`` is differentiated: the score-function estimator of the seeds, at the rollout policy.
    """
    theta = logits.detach().double().clone().requires_grad_(True)
    log_probs = torch.log_softmax(theta, dim=0)
    size = num_generations * groups
    outcomes = torch.tensor(list(itertools.product(range(len(rewards)), repeat=size)))  # (K**size, size)
    probability = log_probs.detach().exp()[outcomes].prod(dim=1)
    outcome_rewards = rewards.double()[outcomes]
    arguments = dict(estimator=estimator, scale=scale, std=std if std != "-" else "sample", eps=eps)
    if scale == "batch":  # the batch statistic is per sampled batch: one call per outcome, vectorised by vmap
        advantages = torch.func.vmap(lambda row: group_advantages(row, num_generations, **arguments))(outcome_rewards)
    else:  # group statistics: every outcome's groups in one call
        advantages = group_advantages(outcome_rewards.reshape(-1), num_generations, **arguments)
        advantages = advantages.view_as(outcome_rewards)
    surrogate = (probability.unsqueeze(1) * advantages * log_probs[outcomes]).sum() / size
    return torch.autograd.grad(surrogate, theta)[0]


def relation(estimate: torch.Tensor, truth: torch.Tensor) -> tuple[float, float]:
    """``(factor, angle)``: the projection ``<e, g> / |g|^2`` of the estimate on the truth, and the angle in degrees."""
    factor = float(estimate @ truth / (truth @ truth))
    cosine = float(estimate @ truth / (estimate.norm() * truth.norm()))
    return factor, math.degrees(math.acos(max(-1.0, min(1.0, cosine))))


def binary_outcomes(num_generations: int) -> torch.Tensor:
    """Every 0/1 reward vector of one group: ``(2**G, G)`` float64."""
    return torch.tensor(list(itertools.product((0.0, 1.0), repeat=num_generations)), dtype=torch.float64)


def mixed_group_probability(success: torch.Tensor | float, num_generations: int) -> torch.Tensor:
    """P(a group of ``G`` iid binary rewards with success rate ``p`` passes dynamic sampling's filter).

    Summed over all ``2**G`` outcomes with the trainer's filter; the GRPO note's closed form is
    ``1 - p**G - (1 - p)**G``.
    """
    success = torch.as_tensor(success, dtype=torch.float64).reshape(-1, 1)
    outcomes = binary_outcomes(num_generations)
    kept = informative_groups(outcomes.reshape(-1), num_generations).double()
    right = outcomes.sum(dim=1)
    probability = success**right * (1 - success) ** (num_generations - right)  # (P, 2**G)
    return (probability * kept).sum(dim=1)


def accepted_law(
    success: tuple[float, ...], prompt_probability: tuple[float, ...], num_generations: int
) -> dict[str, torch.Tensor]:
    """Dynamic sampling's law over prompts and what it does inside a retained group, by enumeration.

    Returns per prompt: ``acceptance`` a(x), the ``accepted`` law ``rho(x) a(x) / sum rho a``, the success rate
    ``accepted_success`` of a retained group's members, and ``pair_success`` P(Y_1 and Y_2 both right | retained)
    (it differs from ``accepted_success**2``: retained siblings are no longer independent).
    """
    outcomes = binary_outcomes(num_generations)
    kept = informative_groups(outcomes.reshape(-1), num_generations).double()
    p = torch.tensor(success, dtype=torch.float64).reshape(-1, 1)
    rho = torch.tensor(prompt_probability, dtype=torch.float64)
    right = outcomes.sum(dim=1)
    probability = p**right * (1 - p) ** (num_generations - right) * kept  # (X, 2**G): retained outcomes only
    acceptance = probability.sum(dim=1)
    safe = acceptance.clamp(min=1e-300)
    return {
        "acceptance": acceptance,
        "accepted": rho * acceptance / (rho * acceptance).sum(),
        "accepted_success": (probability * right / num_generations).sum(dim=1) / safe,
        "pair_success": (probability * outcomes[:, 0] * outcomes[:, 1]).sum(dim=1) / safe,
    }


def _setting_label(estimator: str, scale: str, std: str) -> str:
    label = f'`{estimator}`, `scale_rewards="{scale}"`'
    return label + (f', `reward_std="{std}"`' if std != "-" else "")


def estimator_table() -> str:
    lines = []
    header = "| estimator and scaling | " + " | ".join(f"G={g}: factor | G={g}: angle" for g in GROUP_SIZES) + " |"
    for case, (probabilities, rewards) in CASES.items():
        logits = torch.tensor(probabilities, dtype=torch.float64).log()
        reward_tensor = torch.tensor(rewards, dtype=torch.float64)
        truth = true_gradient(logits, reward_tensor)
        lines += [f"**{case}**; true gradient {_vector(truth)}", "", header, "|---" * (1 + 2 * len(GROUP_SIZES)) + "|"]
        for estimator, scale, std in SETTINGS:
            cells = []
            for g in GROUP_SIZES:
                groups = BATCH_GROUPS if scale == "batch" else 1
                estimate = expected_gradient(logits, reward_tensor, g, estimator, scale, std, groups=groups)
                factor, angle = relation(estimate, truth)
                cells += [f"{factor:.4f}", f"{angle:.2f} deg"]
            lines.append(f"| {_setting_label(estimator, scale, std)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _vector(values: torch.Tensor) -> str:
    return "(" + ", ".join(f"{v:.4f}" for v in values.tolist()) + ")"


def mixed_group_table() -> str:
    lines = [
        "| p | " + " | ".join(f"G={g}" for g in MIXED_GROUP_SIZES) + " |",
        "|---" * (1 + len(MIXED_GROUP_SIZES)) + "|",
    ]
    columns = [mixed_group_probability(torch.tensor(MIXED_PROBABILITIES), g).tolist() for g in MIXED_GROUP_SIZES]
    for row, p in enumerate(MIXED_PROBABILITIES):
        lines.append(f"| {p} | " + " | ".join(f"{column[row]:.4f}" for column in columns) + " |")
    return "\n".join(lines) + "\n"


def accepted_law_table() -> str:
    rho = tuple(1 / len(PROMPT_SUCCESS) for _ in PROMPT_SUCCESS)
    law = accepted_law(PROMPT_SUCCESS, rho, ACCEPTED_GROUP_SIZE)
    lines = [
        "| success rate p(x) | dataset rho(x) | acceptance a(x) | accepted law | success rate in a retained group "
        "| P(both of two siblings right), retained | same if independent |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, p in enumerate(PROMPT_SUCCESS):
        if law["acceptance"][i] > 0:
            inside = law["accepted_success"][i].item()
            pair = f"{law['pair_success'][i].item():.4f} | {inside**2:.4f}"
            inside = f"{inside:.4f}"
        else:
            inside, pair = "never retained", "- | -"
        lines.append(
            f"| {p} | {rho[i]:.4f} | {law['acceptance'][i].item():.4f} | {law['accepted'][i].item():.4f} "
            f"| {inside} | {pair} |"
        )
    return "\n".join(lines) + "\n"


def render_table() -> str:
    """The whole generated ``docs/estimators_table.md``."""
    return "\n".join(
        [
            "<!-- Generated by `python docs/scripts/estimators.py`; tests/test_fidelity.py fails when it is stale. -->",
            "",
            "### Expected gradient relative to the true one",
            "",
            "Exact expectation over every sampled group (softmax policy over three responses, one prompt; the",
            f'`scale_rewards="batch"` rows use {BATCH_GROUPS} groups of that prompt per batch), advantages from',
            f"`group_advantages` with the trainer's stabiliser eps = {TRAINER_EPS:g}. *factor*: projection of the",
            "expected update on the true gradient, `<E g, grad V> / |grad V|^2`; *angle*: between the two.",
            "",
            estimator_table(),
            "### Probability that a binary-reward group is mixed (kept by dynamic sampling)",
            "",
            "Summed over all 2^G outcomes with the trainer's filter; equals `1 - p^G - (1 - p)^G`.",
            "",
            mixed_group_table(),
            "### What dynamic sampling trains on",
            "",
            f"Seven equally likely prompts, G = {ACCEPTED_GROUP_SIZE}, exact over all 2^G outcomes of each prompt.",
            "",
            accepted_law_table(),
        ]
    )


def draw_plot(path: Path = PLOT_PATH) -> None:
    """The mixed-group probability curves for G = 4, 8, 16 (same function as the table)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    p = torch.linspace(0, 1, 201, dtype=torch.float64)
    figure = Figure(figsize=(6.4, 3.8), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for g in MIXED_GROUP_SIZES:
        axes.plot(p.numpy(), mixed_group_probability(p, g).numpy(), label=f"G = {g}")
    axes.set_xlabel("success probability p of the prompt under the current policy")
    axes.set_ylabel("P(mixed group) = $1 - p^G - (1-p)^G$")
    axes.set_title("Chance that a group has a reward contrast (kept by dynamic sampling)", fontsize=10)
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1.02)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower center")
    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/estimators_table.md is stale")
    args = parser.parse_args(argv)
    table = render_table()
    if args.check:
        stale = not TABLE_PATH.exists() or TABLE_PATH.read_text() != table
        print(f"{TABLE_PATH} is {'stale: run python docs/scripts/estimators.py' if stale else 'up to date'}")
        return int(stale)
    TABLE_PATH.write_text(table)
    draw_plot()
    print(f"wrote {TABLE_PATH} and {PLOT_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
