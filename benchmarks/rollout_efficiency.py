"""Rollout efficiency of dynamic-sampling refill strategies, simulated (no model), in one run.

Prompts have per-prompt success probabilities drawn from a difficulty mix; a group of G completions of a prompt
with success probability p has Binomial(G, p) correct answers and is informative iff 0 < correct < G (binary
rewards, DAPO Eq. 11). Every step needs ``--groups`` informative groups. Strategies compared:

* ``veRL recipe``: whole generation batches of 3x the target (``gen_batch_size = 3 * train_batch_size``), kept groups
  accumulate, surplus discarded, at most 10 batches (veRL raises past that; here the step counts as exhausted).
* ``one-by-one``: OpenRLHF-style replacement: round 1 generates the batch, every later round exactly the missing
  number of prompts (no surplus, many rounds; no round limit besides 100).
* ``1x + refill``: ``dynamic_sampling_oversample=1.0``: round 1 is the batch, later rounds ``plan_refill_groups``.
* ``planner, pooled``: ``trl_dapo_ext.dynamic_sampling.planner.RefillPlanner`` (defaults) with one retention estimate for every
  prompt (no use of the history): what strata add is the difference to the next row.
* ``planner``: the trainer's default: the same planner, with prompts in strata by their history
  (``PromptHistory.stratum``: unseen, or a bucket of the retention predicted from the prompt's tally of right and
  wrong answers), so that a round's informative count is predicted from the prompts it actually holds.
* ``planner+skip``: the planner plus ``trl_dapo_ext.dynamic_sampling.history.PromptHistory`` skipping in the refill stream.
* ``planner @c``: the planner at confidence ``c`` (``--sweep``): fewer second rounds for more surplus. The summary
  says per mix whether any confidence run meets all three planner targets at once.

For mixes where veRL's first batch rarely falls short, the script also prints a lower bound: the surplus of a
clairvoyant sizing rule that knows every prompt's exact chance of being informative before generating it, at veRL's
shortfall rate. No sizing rule that generates the prompts it is handed can discard less at that rate.

Batch prompts come from a dataloader-like shuffled stream (one pass per epoch, cannot be skipped: TRL's dataloader
hands them to the trainer); refill prompts from ``trl_dapo_ext.dynamic_sampling.stream.RefillSampler``, as in the trainer.

    python benchmarks/rollout_efficiency.py [--steps 200] [--groups 32] [--generations 8] [--dataset 2048]

Targets (issue 9) are checked at the end and printed as PASS / FAIL lines.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from trl_dapo_ext.core.groups import GroupOutcome
from trl_dapo_ext.dynamic_sampling.history import PromptHistory
from trl_dapo_ext.dynamic_sampling.planner import POOLED, RefillPlanner, plan_refill_groups
from trl_dapo_ext.dynamic_sampling.screening import (
    ScreeningEstimates,
    probe_rule_bound,
)
from trl_dapo_ext.dynamic_sampling.stream import RefillSampler

MAX_ROUNDS = 10  # veRL's max_num_gen_batches and our dynamic_sampling_max_rounds default
VERL_FACTOR = 3  # veRL DAPO recipe: gen_batch_size = train_batch_size * 3


# --- difficulty mixes ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mix:
    name: str
    draw: Callable[[np.random.Generator, int], np.ndarray]  # initial success probability per prompt
    drift_per_step: float = 0.0  # logit shift per step for prompts with 0 < p < 1 (the policy learning)
    churn_per_step: float = 0.0  # chance per step that a prompt's success chance is drawn afresh from the mix


def _share(rng: np.random.Generator, size: int, fixed: float, share: float, rest: tuple[float, float]) -> np.ndarray:
    p = rng.beta(*rest, size=size)
    p[rng.random(size) < share] = fixed
    return p


MIXES = [
    Mix("easy-heavy", lambda rng, n: rng.beta(6.0, 1.0, size=n)),
    Mix("hard-heavy", lambda rng, n: rng.beta(1.0, 6.0, size=n)),
    Mix("U-shaped", lambda rng, n: rng.beta(0.3, 0.3, size=n)),
    Mix("70% unsolvable", lambda rng, n: _share(rng, n, 0.0, 0.7, (1.0, 1.0))),
    Mix("60% always-solved", lambda rng, n: _share(rng, n, 1.0, 0.6, (2.0, 2.0))),
    Mix("drifting (hard->easy)", lambda rng, n: rng.beta(1.0, 3.0, size=n), drift_per_step=0.02),
]


DRIFTING = {mix.name for mix in MIXES if mix.drift_per_step}  # the bound reads the initial mix only


def probabilities_at(p0: np.ndarray, mix: Mix, step: int) -> np.ndarray:
    if mix.drift_per_step == 0.0:
        return p0
    inner = (p0 > 0.0) & (p0 < 1.0)
    p = p0.copy()
    logit = np.log(p0[inner] / (1.0 - p0[inner])) + mix.drift_per_step * step
    p[inner] = 1.0 / (1.0 + np.exp(-logit))
    return p


def churned(p0: np.ndarray, mix: Mix, rng: np.random.Generator) -> np.ndarray:
    """A share ``mix.churn_per_step`` of the prompts with success chances drawn afresh (a copy)."""
    fresh = rng.random(len(p0)) < mix.churn_per_step
    p0 = p0.copy()
    p0[fresh] = mix.draw(rng, int(fresh.sum()))
    return p0


def expected_retention(p: np.ndarray, generations: int) -> float:
    return float(np.mean(1.0 - p**generations - (1.0 - p) ** generations))


# --- one simulated run ----------------------------------------------------------------------------------------------


class EpochStream:
    """A dataloader: shuffled passes over the dataset (numpy, seeded), handing out ``count`` indices at a time."""

    def __init__(self, size: int, seed: int):
        self.size, self.rng, self.order, self.position = size, np.random.default_rng(seed), np.empty(0, int), 0

    def take(self, count: int) -> list[int]:
        out: list[int] = []
        while len(out) < count:
            if self.position == len(self.order):
                self.order, self.position = self.rng.permutation(self.size), 0
            step = min(count - len(out), len(self.order) - self.position)
            out.extend(self.order[self.position : self.position + step].tolist())
            self.position += step
        return out


@dataclass
class Tally:
    generated: int = 0  # groups
    retained: int = 0
    rounds: list[int] = field(default_factory=list)
    surplus: int = 0
    exhausted: int = 0
    skipped: int = 0
    readmitted: int = 0
    never_generated: int = 0
    longest_gap: int = 0  # most steps any prompt went without being generated (start and end of the run count)

    def add(self, other: Tally) -> None:
        """Pool another run's counts (sums, all rounds; the worst coverage of any run)."""
        for name in ("generated", "retained", "surplus", "exhausted", "skipped", "readmitted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.rounds += other.rounds
        self.never_generated = max(self.never_generated, other.never_generated)
        self.longest_gap = max(self.longest_gap, other.longest_gap)


class World:
    """Generates groups: outcome per prompt index at a step (binary rewards, G completions)."""

    def __init__(self, mix: Mix, p0: np.ndarray, generations: int, seed: int):
        self.mix, self.p0, self.generations = mix, p0, generations
        self.rng = np.random.default_rng(seed)
        self.p = p0
        self.visits = np.zeros(len(p0), dtype=int)
        self.last_seen = np.full(len(p0), -1)
        self.longest_gap = np.zeros(len(p0), dtype=int)
        self.step = 0

    def at_step(self, step: int) -> None:
        if self.mix.churn_per_step and step > self.step:  # the policy forgets or learns some prompts outright
            self.p0 = churned(self.p0, self.mix, self.rng)
        self.p = probabilities_at(self.p0, self.mix, step)
        self.step = step

    def close(self, steps: int) -> None:
        self.longest_gap = np.maximum(self.longest_gap, steps - self.last_seen - 1)

    def generate(self, indices: list[int]) -> tuple[list[GroupOutcome], list[int]]:
        """Each prompt's group: its outcome, and its number of right answers (the history's per-prompt tally)."""
        correct = self.rng.binomial(self.generations, self.p[indices])
        np.add.at(self.visits, indices, 1)
        self.longest_gap[indices] = np.maximum(self.longest_gap[indices], self.step - self.last_seen[indices] - 1)
        self.last_seen[indices] = self.step
        outcomes = np.full(len(indices), GroupOutcome.INFORMATIVE)
        outcomes[correct == self.generations] = GroupOutcome.ALL_MAX
        outcomes[correct == 0] = GroupOutcome.ALL_MIN
        return [GroupOutcome(int(o)) for o in outcomes], correct.tolist()


def informative_count(outcomes: list[GroupOutcome]) -> int:
    return sum(outcome == GroupOutcome.INFORMATIVE for outcome in outcomes)


class OraclePlanner(RefillPlanner):
    """The cost-aware planner told every prompt's exact retention (to 0.05) and the mix's mean: the bound rows.

    Strata are retention bins named by their value; every posterior is that value with a huge prior strength, so
    the sizing is the cheapest plan for prompts whose chances are known exactly (without skipping any).
    """

    STRENGTH = 1e5
    mean_retention = 0.5

    def _posteriors(self, strata: set[str]) -> dict[str, tuple[float, float]]:
        return {s: self._sharp(float(s) if s != POOLED else self.mean_retention) for s in strata}

    def _pooled_alpha_beta(self) -> tuple[float, float]:
        return self._sharp(self.mean_retention)

    def _pooled_mean(self) -> float:
        return self.mean_retention

    def _sharp(self, q: float) -> tuple[float, float]:
        q = min(max(q, 1e-4), 1 - 1e-4)
        return q * self.STRENGTH, (1 - q) * self.STRENGTH


def make_planner(strategy: str, args: argparse.Namespace, latency: float) -> RefillPlanner:
    """The planner a strategy runs: the confidence rule (``planner*`` rows) or the cost-aware one at ``latency``."""
    if strategy.startswith("oracle"):
        return OraclePlanner(round_latency=latency, generations=args.generations, decay=args.decay)
    if strategy.startswith("cost-aware"):
        return RefillPlanner(round_latency=latency, generations=args.generations, decay=args.decay)
    return RefillPlanner(confidence=args.confidence, decay=args.decay)


def run(strategy: str, mix: Mix, p0: np.ndarray, args: argparse.Namespace, seed: int, latency: float = 0.0) -> Tally:
    """One simulated run; ``latency`` (completion-equivalents per round) only steers the cost-aware planners."""
    target, G = args.groups, args.generations
    world = World(mix, p0, G, seed=seed + 1)
    batches = EpochStream(len(p0), seed=seed + 2)
    refill_stream = RefillSampler(len(p0), seed=seed + 3)
    planner = make_planner(strategy, args, latency)
    oracle = isinstance(planner, OraclePlanner)
    skipping = strategy.endswith("+skip")
    # The history remembers every prompt's outcomes and right-answer tally: strata for the planner, skips with
    # planner+skip.
    history = PromptHistory(window=args.window, floor=args.floor, seed=seed, generations=G)
    stratified = strategy not in ("planner, pooled", "veRL recipe", "one-by-one", "1x + refill")
    tally = Tally()

    def stratum(index: int) -> str:
        if oracle:  # the exact retention of this prompt now, to 0.05
            q = 1.0 - world.p[index] ** G - (1.0 - world.p[index]) ** G
            return f"{round(q * 20) / 20:.2f}"
        return history.stratum(index) if stratified else POOLED

    def refill(count: int, step: int, round_index: int, commit: bool = True) -> list[int]:
        if not skipping:
            return refill_stream.take(count) if commit else refill_stream.peek(count)
        stream = refill_stream if commit else copy.copy(refill_stream)  # a preview must not advance the stream
        admission = history.admit(stream.take, count, step=step, round_index=round_index, commit=commit)
        if commit:
            tally.skipped += admission.skipped
            tally.readmitted += admission.readmitted
        return admission.admitted

    def candidates(step: int, round_index: int) -> Callable[[int], list[str]]:
        return lambda count: [stratum(i) for i in refill(count, step, round_index, commit=False)]

    for step in range(args.steps):
        world.at_step(step)
        if oracle:
            planner.mean_retention = expected_retention(world.p, G)
        kept = generated = rounds = 0
        if strategy == "veRL recipe":
            while kept < target and rounds < MAX_ROUNDS:
                outcomes, _ = world.generate(batches.take(VERL_FACTOR * target))
                kept += informative_count(outcomes)
                generated += len(outcomes)
                rounds += 1
        else:
            indices = batches.take(target)
            if strategy not in ("one-by-one", "1x + refill"):
                own = [[stratum(i) for i in indices]]
                count = planner.first_round(target, MAX_ROUNDS, own=own, candidates=candidates(step, 1))
                indices += refill(count, step, 1)
            max_rounds = 100 if strategy == "one-by-one" else MAX_ROUNDS
            while True:
                strata = [stratum(i) for i in indices]  # before this round's outcomes are recorded
                outcomes, correct = world.generate(indices)
                history.record(indices, outcomes, upper=correct, scorable=[G] * len(indices))
                planner.observe_groups(strata, [outcome == GroupOutcome.INFORMATIVE for outcome in outcomes])
                kept += informative_count(outcomes)
                generated += len(indices)
                rounds += 1
                missing = target - kept
                if missing <= 0 or rounds == max_rounds:
                    break
                if strategy == "one-by-one":
                    count = missing
                elif strategy == "1x + refill":
                    count = plan_refill_groups(missing, generated, kept, max_groups=target)
                else:
                    rounds_left = max_rounds - rounds
                    count = planner.next_round(missing, rounds_left, candidates=candidates(step, rounds + 1))
                    if count == 0:
                        break
                indices = refill(count, step, rounds + 1)
            planner.end_step()
        tally.generated += generated
        tally.retained += min(kept, target)
        tally.surplus += max(kept - target, 0)
        tally.exhausted += kept < target
        tally.rounds.append(rounds)
    world.close(args.steps)
    tally.never_generated = int(np.sum(world.visits == 0))
    tally.longest_gap = int(world.longest_gap.max())
    return tally


STRATEGIES = ["veRL recipe", "one-by-one", "1x + refill", "planner, pooled", "planner", "planner+skip"]
PEERS = ["veRL recipe", "one-by-one", "1x + refill"]
COST_AWARE = ["cost-aware", "cost-aware+skip", "oracle"]  # sized for the round latency: one run per latency
LATENCIES = [0.0, 4.0, 16.0, 64.0, 256.0]


def cost_per_retained(tally: Tally, latency: float, generations: int) -> float:
    """Completion-equivalents (seconds when one completion costs a second) per retained group."""
    return (latency * sum(tally.rounds) + generations * tally.generated) / max(tally.retained, 1)


def pooled_run(strategy: str, mix_number: int, args: argparse.Namespace, latency: float = 0.0) -> Tally:
    """``--seeds`` independent runs of one strategy on ``MIXES[mix_number]`` (each seed its own prompts), pooled."""
    mix, tally = MIXES[mix_number], Tally()
    for seed in range(args.seed, args.seed + args.seeds):
        p0 = mix.draw(np.random.default_rng(seed * 1000 + mix_number), args.dataset)
        tally.add(run(strategy, mix, p0, args, seed=seed * 1000 + mix_number, latency=latency))
    return tally


# --- screening and the fixed budget (issue 43) -----------------------------------------------------------------------

SHARES = [0.2, 0.5, 0.8]  # zero-variance share of plain GRPO groups of G
GROUP_SIZES = [8, 16, 32]
SCREEN_LATENCIES = [0.0, 16.0, 64.0]
FAMILIES = ["atoms", "graded"]


def _beta_moment(a: float, b: float, power: int) -> float:
    """``E[p^power]`` for ``p ~ Beta(a, b)``."""
    return math.prod((a + i) / (a + b + i) for i in range(power))


def screening_mix(family: str, share: float, generations: int, churn: float = 0.0) -> Mix:
    """A mix whose plain GRPO groups of ``generations`` are zero-variance with chance ``share`` (about).

    ``atoms``: a share of the prompts never (2/3) or always (1/3) solved, the rest Beta(2, 2): zero-variance prompts
    stay so (GRESO, arXiv 2506.02177: over 90% of an epoch's zero-variance prompts were so before), and probes see it.
    ``graded``: every prompt Beta(a, 3a), ``a`` set by bisection: zero-variance groups come from prompts with small
    but nonzero pass rates, which probes often miss and history predicts less sharply.
    """
    if family == "atoms":
        rest = 2 * _beta_moment(2.0, 2.0, generations)
        atoms = max(share - rest, 0.0) / (1.0 - rest)

        def draw(rng: np.random.Generator, n: int) -> np.ndarray:
            p, u = rng.beta(2.0, 2.0, size=n), rng.random(n)
            p[u < atoms * 2 / 3] = 0.0
            p[(u >= atoms * 2 / 3) & (u < atoms)] = 1.0
            return p

    else:

        def zero_variance(log_a: float) -> float:
            a = math.exp(log_a)
            return _beta_moment(a, 3 * a, generations) + _beta_moment(3 * a, a, generations)

        low, high = math.log(1e-3), math.log(1e3)  # zero-variance share falls as a grows
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if zero_variance(middle) > share else (low, middle)
        a = math.exp(low)

        def draw(rng: np.random.Generator, n: int) -> np.ndarray:
            return rng.beta(a, 3 * a, size=n)

    return Mix(f"{family} {share:.0%} zv, G={generations}", draw, churn_per_step=churn)


@dataclass
class Ledger:
    """What one screening-sweep run generated and trained on."""

    completions: int = 0
    groups: int = 0  # informative groups trained on
    informative_completions: int = 0  # completions in them (G each; Knapsack's groups vary)
    rounds: int = 0
    steps: int = 0
    screened: int = 0  # prompts that got probes
    dropped: int = 0  # screened prompts dropped after their probes
    completed_agreeing: int = 0  # prompts whose probes agreed and that were completed anyway
    skipped: int = 0  # prompts passed over by prompt-history skipping
    visits: int = 0  # prompts generated for at all: visits / dataset = epochs of history
    over_budget: int = 0  # steps that generated more than B x G (fixed-budget modes: must stay 0)
    short: int = 0  # steps that trained on fewer than B groups (fill modes: exhausted)

    def add(self, other: Ledger) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def per_group(self, generations: int, latency: float = 0.0) -> float:
        """Completions (plus ``latency`` per round) per informative group of G (per G informative completions)."""
        return generations * (self.completions + latency * self.rounds) / max(self.informative_completions, 1)


@dataclass(frozen=True)
class Screen:
    mode: str  # grpo, refill (today's planner), knapsack, speed, budget (ours), fill (ours)
    probes: int = 0
    skip: bool = False
    pipeline: bool = False  # ours: dynamic_sampling_pipeline (the next step's probes ride in this step's call)


SCREEN_STRATEGIES = {
    "GRPO": Screen("grpo"),
    "DAPO refill": Screen("refill"),
    "DAPO refill+skip": Screen("refill", skip=True),
    "SPEED k=4": Screen("speed", 4),
    "Knapsack": Screen("knapsack"),
    "ours budget k=2": Screen("budget", 2),
    "ours budget k=4": Screen("budget", 4),
    "ours budget+skip k=2": Screen("budget", 2, skip=True),
    "ours budget+skip k=4": Screen("budget", 4, skip=True),
    "ours fill k=2": Screen("fill", 2),
    "ours fill+skip k=2": Screen("fill", 2, skip=True),
    "ours pipelined budget k=4": Screen("budget", 4, pipeline=True),
    "ours pipelined fill k=4": Screen("fill", 4, pipeline=True),
}
OURS = "ours budget k=4"  # the configuration docs/choosing.md recommends: checked against DAPO's refill
CHECKED = (OURS, "ours pipelined budget k=4")  # ... within the step and pipelined (one generation call per step)


def knapsack_allocation(success: np.ndarray, budget: int, least: int = 2, most: int = 256) -> np.ndarray:
    """Completions per prompt maximising the Knapsack RL value ``sum_i (1 - p^n - (1 - p)^n) p (1 - p)^2``.

    Every prompt gets ``least``; the rest goes one completion at a time to the largest marginal value (the value is
    concave in ``n``, so this greedy is the paper's dynamic programme's optimum); what no prompt values (every
    estimate 0 or 1) goes to the hardest prompts in turn, as the paper gives leftovers to pass-rate-0 prompts.
    """
    n = np.full(len(success), least)
    spare = budget - int(n.sum())
    if spare < 0:
        raise ValueError(f"a budget of {budget} cannot give {len(success)} prompts {least} completions each")
    p, weight = success, success * (1 - success) ** 2

    def gain(count: np.ndarray) -> np.ndarray:  # value(count + 1) - value(count)
        return weight * (p**count * (1 - p) + (1 - p) ** count * p)

    while spare > 0:
        marginal = np.where(n < most, gain(n), -1.0)
        best = int(np.argmax(marginal))
        if marginal[best] <= 0:
            hardest = np.argsort(success, kind="stable")
            for i in range(spare):
                n[hardest[i % len(n)]] += 1
            break
        n[best] += 1
        spare -= 1
    return n


class ScreeningRun:
    """One simulated run of a screening-sweep strategy (everything but today's refill, which :func:`run` covers)."""

    def __init__(self, screen: Screen, mix: Mix, p0: np.ndarray, args: argparse.Namespace, seed: int, latency: float):
        self.screen, self.mix, self.args, self.latency = screen, mix, args, latency
        self.G, self.B, self.k = args.generations, args.groups, screen.probes
        self.p = p0.copy()
        self.rng = np.random.default_rng(seed + 1)
        self.batches = EpochStream(len(p0), seed=seed + 2)
        self.stream = RefillSampler(len(p0), seed=seed + 3)
        self.history = PromptHistory(window=args.window, floor=args.floor, seed=seed, generations=self.G)
        self.estimates = ScreeningEstimates(decay=args.decay)
        self.ledger = Ledger()
        self.success = [1.0, 2.0]  # Knapsack's prior for unseen prompts: right, total answers so far (+1, +2)

    def right(self, indices: list[int], count: int | np.ndarray) -> np.ndarray:
        return self.rng.binomial(count, self.p[indices]) if indices else np.zeros(0, dtype=int)

    def record(self, indices: list[int], right: np.ndarray, total: int | np.ndarray) -> None:
        """The prompt history learns from every generated completion, probes of dropped prompts included."""
        total = np.broadcast_to(total, len(indices))
        outcomes = np.full(len(indices), GroupOutcome.INFORMATIVE)
        outcomes[right == total] = GroupOutcome.ALL_MAX
        outcomes[right == 0] = GroupOutcome.ALL_MIN
        self.history.record(indices, outcomes.tolist(), upper=list(right), scorable=list(total))
        self.success[0] += int(np.sum(right))
        self.success[1] += int(np.sum(total))

    def rate(self) -> float:
        """Informative groups per completion-equivalent so far (a floor no decision should pull down)."""
        ledger = self.ledger
        if not ledger.informative_completions:
            return 0.0
        return ledger.informative_completions / self.G / (ledger.completions + self.latency * ledger.rounds)

    def run(self) -> Ledger:
        for step in range(self.args.steps):
            if step and self.mix.churn_per_step:
                self.p = churned(self.p, self.mix, self.rng)
            batch = self.batches.take(self.B)
            getattr(self, f"{self.screen.mode}_step")(step, batch)
            self.estimates.end_step()
            self.ledger.steps += 1
        return self.ledger

    # --- steps without probes ---------------------------------------------------------------------------------------

    def train_groups(self, right: np.ndarray, total: np.ndarray, room: int | None = None) -> None:
        """Count the informative groups trained on; at most ``room`` of them (a full batch drops the surplus)."""
        informative = np.flatnonzero((right > 0) & (right < total))[:room]
        self.ledger.groups += len(informative)
        self.ledger.informative_completions += int(total[informative].sum())

    def grpo_step(self, step: int, batch: list[int]) -> None:
        right = self.right(batch, self.G)
        self.train_groups(right, np.full(len(batch), self.G))
        self.record(batch, right, self.G)
        self.ledger.completions += self.B * self.G
        self.ledger.rounds += 1
        self.ledger.visits += len(batch)

    def knapsack_step(self, step: int, batch: list[int]) -> None:
        """Knapsack RL's allocation of B x G over the batch by each prompt's last estimated pass rate."""
        unseen = self.success[0] / self.success[1]
        estimate = []
        for index in batch:
            tally = self.history.tallies.get(index)
            estimate.append((0.5 + tally[0]) / (1 + sum(tally)) if tally else unseen)  # Jeffreys posterior mean
        counts = knapsack_allocation(np.array(estimate), self.B * self.G, most=4 * self.G)
        right = self.right(batch, counts)
        self.train_groups(right, counts)
        self.record(batch, right, counts)
        self.ledger.completions += int(counts.sum())
        self.ledger.over_budget += int(counts.sum()) > self.B * self.G
        self.ledger.rounds += 1
        self.ledger.visits += len(batch)

    # --- screening steps ---------------------------------------------------------------------------------------------

    def admit(self, propose: Callable[[int], list[int]], count: int, step: int, round_index: int) -> list[int]:
        if not self.screen.skip:
            return propose(count)
        admission = self.history.admit(propose, count, step=step, round_index=round_index)
        self.ledger.skipped += admission.skipped
        return admission.admitted

    def proposals(self, batch: list[int]) -> Callable[[int], list[int]]:
        """The batch's own prompts first, then the refill stream (a screened step may pass over its own prompts)."""
        queue = list(batch)

        def propose(count: int) -> list[int]:
            own = queue[:count]
            del queue[:count]
            return own + self.stream.take(count - len(own))

        return propose

    def speed_step(self, step: int, batch: list[int]) -> None:
        """SPEED-RL's rule: probes of k, a prompt completed iff its probes are mixed (as many as the batch misses),
        new prompts screened for what is still missing at the estimated mixed rate, rounds until B groups."""
        k, G, B = self.k, self.G, self.B
        propose = self.proposals(batch)
        mixed: list[tuple[int, int, str]] = []  # (index, right probes, stratum when screened)
        missing = B
        for round_index in range(MAX_ROUNDS):
            take = min(len(mixed), max(missing, 0))
            short = missing - take
            screen = 0
            if short > 0 and round_index < MAX_ROUNDS - 1:  # the last round only completes
                wanted = math.ceil(short / max(self.estimates.mixed_rate(), 1e-6) - 1e-9)
                screen = min(wanted, math.ceil(self.args.max_oversample * B))
            if not take and not screen:
                break
            done, surplus = mixed[:take], mixed[take:]
            indices = [index for index, _, _ in done]
            right = np.array([r for _, r, _ in done], dtype=int) + self.right(indices, G - k)
            self.train_groups(right, np.full(len(done), G), room=max(missing, 0))
            missing -= int(np.sum((right > 0) & (right < G)))
            self.record(indices, right, G)
            self.drop(surplus)
            new = self.admit(propose, screen, step, round_index + 1)
            strata = [self.history.stratum(index) for index in new]
            probes = self.right(new, k)
            is_mixed = (probes > 0) & (probes < k)
            self.estimates.observe_probes(strata, is_mixed.tolist())
            mixed = [(i, int(r), s) for i, r, s, m in zip(new, probes, strata, is_mixed) if m]
            self.drop([(i, int(r), s) for i, r, s, m in zip(new, probes, strata, is_mixed) if not m])
            self.ledger.completions += take * (G - k) + len(new) * k
            self.ledger.rounds += 1
            self.ledger.screened += len(new)
            self.ledger.visits += len(new)
            if missing <= 0:
                break
        self.drop(mixed)
        self.ledger.short += missing > 0

    def drop(self, items: list[tuple[int, int, str]]) -> None:
        """Prompts dropped after their probes: counted, and their probes recorded in the history."""
        if items:
            self.record([index for index, _, _ in items], np.array([r for _, r, _ in items]), self.k)
            self.ledger.dropped += len(items)


def screening_run(name: str, family: str, share: float, args: argparse.Namespace, latency: float) -> Ledger:
    """``--seeds`` runs of one strategy on one cell, pooled (each seed its own prompts, the same for every strategy)."""
    screen, G = SCREEN_STRATEGIES[name], args.generations
    mix = screening_mix(family, share, G, args.churn)
    ledger = Ledger()
    for seed in range(args.seed, args.seed + args.seeds):
        key = seed * 1000 + FAMILIES.index(family) * 100 + SHARES.index(share) * 10 + GROUP_SIZES.index(G)
        p0 = mix.draw(np.random.default_rng(key), args.dataset)
        if screen.mode == "refill":  # today's cost-aware planner, from the refill section above
            tally = run("cost-aware+skip" if screen.skip else "cost-aware", mix, p0, args, seed=key, latency=latency)
            refill_ledger = Ledger(
                completions=G * tally.generated,
                groups=tally.retained,
                informative_completions=G * tally.retained,
                rounds=sum(tally.rounds),
                steps=args.steps,
                skipped=tally.skipped,
                visits=tally.generated,
                short=tally.exhausted,
            )
            ledger.add(refill_ledger)
        elif screen.mode in ("budget", "fill"):  # ours: the trainer's own collector
            ledger.add(trainer_rule_ledger(screen, mix, p0, args, seed=key, latency=latency))
        else:
            ledger.add(ScreeningRun(screen, mix, p0, args, seed=key, latency=latency).run())
    return ledger


def trainer_rule_ledger(
    screen: Screen, mix: Mix, p0: np.ndarray, args: argparse.Namespace, seed: int, latency: float
) -> Ledger:
    """One run of our modes by the trainer's own decision code (`ScreeningCollector` on a stub trainer whose rounds
    draw rewards from the pass rates: `screening_cost.run_trainer_rule`), not a model of it."""
    from screening_cost import run_trainer_rule

    churn = np.random.default_rng(seed + 1)

    def on_step(step: int, success: np.ndarray) -> None:
        if step and mix.churn_per_step:
            success[:] = churned(success, mix, churn)

    cost = run_trainer_rule(
        p0.copy(),
        seed=seed,
        steps=args.steps,
        groups=args.groups,
        generations=args.generations,
        on_step=on_step,
        dynamic_sampling_screen_generations=screen.probes,
        dynamic_sampling_fixed_budget=screen.mode == "budget",
        dynamic_sampling_pipeline=screen.pipeline,
        dynamic_sampling_skip_window=args.window if screen.skip else 0,
        dynamic_sampling_skip_floor=args.floor,
        dynamic_sampling_round_latency=latency,
        dynamic_sampling_retention_decay=args.decay,
    )
    return Ledger(
        completions=cost.completions,
        groups=cost.retained,
        informative_completions=args.generations * cost.retained,
        rounds=cost.rounds,
        steps=cost.steps,
        screened=cost.screened,
        dropped=cost.dropped,
        completed_agreeing=cost.agreeing_completed,
        skipped=cost.skipped,
        visits=cost.visits,
        over_budget=cost.over_budget,
        short=cost.short if screen.mode == "fill" else 0,
    )


def screening_cells(args: argparse.Namespace) -> list[tuple[str, float, int]]:
    if args.quick:
        return [(family, 0.5, 8) for family in FAMILIES]
    return [(family, share, G) for family in FAMILIES for share in SHARES for G in GROUP_SIZES]


def screening_sweep(args: argparse.Namespace) -> int:
    """Completions per informative group of every strategy on every cell and latency; ours against DAPO's refill.
    Our modes run the trainer's own decision code (`trainer_rule_ledger`); the peers are models of their papers."""
    started = time.perf_counter()
    cells = screening_cells(args)
    latencies = [0.0, 16.0] if args.quick else args.screen_latencies
    names = list(SCREEN_STRATEGIES)
    jobs = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for family, share, G in cells:
            cell_args = argparse.Namespace(**{**vars(args), "generations": G})
            for latency in latencies:
                for name in names:
                    jobs[family, share, G, latency, name] = pool.submit(
                        screening_run, name, family, share, cell_args, latency
                    )
        ledgers = {key: job.result() for key, job in jobs.items()}
    print(
        f"\n## Screening and the fixed budget: completions per informative group (x G; the floor is 1.00, plain "
        f"GRPO pays 1 / (1 - zero-variance share)), {args.groups} groups per step, {args.steps} steps, "
        f"{args.dataset} prompts, churn {args.churn:g} per step, seeds {args.seed}..{args.seed + args.seeds - 1} "
        f"pooled; at latency L a round costs L completions more. Bounds: the least any rule that screens stream "
        f"prompts with k probes and no history can pay (exact, from the cell's pass rates); groups/step: informative "
        f"groups trained per step (GRPO: B x retention); epochs: prompt visits / dataset (history to skip on)."
    )
    failures = 0
    for family, share, G in cells:
        cell_args = argparse.Namespace(**{**vars(args), "generations": G})
        mix = screening_mix(family, share, G)
        key = args.seed * 1000 + FAMILIES.index(family) * 100 + SHARES.index(share) * 10 + GROUP_SIZES.index(G)
        p0 = mix.draw(np.random.default_rng(key), args.dataset)
        bounds = {k: probe_rule_bound(p0, k, G)[0] / G for k in (2, 4) if k < G}
        zero_variance = 1 - expected_retention(p0, G)
        print(
            f"\n### {mix.name}: zero-variance share {zero_variance:.2f}; GRPO formula {1 / (1 - zero_variance):.2f}x G; "
            + ", ".join(f"k={k} no-history bound {bound:.2f}x G" for k, bound in bounds.items())
        )
        print(
            f"{'strategy':<26} "
            + " ".join(f"{'L=' + format(L, 'g'):>7}" for L in latencies)
            + "  groups/step  rounds/step  screened/step  dropped/step  agreeing completed/step  epochs  over budget"
            + "  short"
        )
        for name in names:
            rows = [ledgers[family, share, G, L, name] for L in latencies]
            base = rows[0]
            steps = max(base.steps, 1)
            print(
                f"{name:<26} "
                + " ".join(f"{row.per_group(G, L) / G:>7.2f}" for row, L in zip(rows, latencies))
                + f"  {base.groups / steps:>11.1f}  {base.rounds / steps:>11.2f}  {base.screened / steps:>13.1f}"
                + f"  {base.dropped / steps:>12.1f}"
                + f"  {base.completed_agreeing / steps:>23.1f}  {base.visits / args.dataset / args.seeds:>6.1f}"
                + f"  {base.over_budget:>11}  {base.short:>5}"
            )
        for L, checked in ((L, checked) for checked in CHECKED for L in latencies if checked in names):
            ours = ledgers[family, share, G, L, checked].per_group(G, L)
            refill = ledgers[family, share, G, L, "DAPO refill"].per_group(G, L)
            ok = ours <= refill
            failures += not ok
            print(
                f"{'PASS' if ok else 'FAIL'}  {checked} {ours / G:.2f}x G <= DAPO refill {refill / G:.2f}x G "
                f"at L={L:g}"
            )
        for name in names:
            over = ledgers[family, share, G, latencies[0], name].over_budget
            if over:
                failures += 1
                print(f"FAIL  {name} exceeded the step budget in {over} steps")
        if share == 0.5 and G == 8:
            best = min(names, key=lambda name: ledgers[family, share, G, 0.0, name].per_group(G))
            print(
                f"cheapest at 50% zero-variance, G=8, L=0: {best}, "
                f"{ledgers[family, share, G, 0.0, best].per_group(G) / G:.2f}x G"
            )
    if not args.quick:
        history_sweep(args)
    print(f"\n{failures} screening target(s) missed; {time.perf_counter() - started:.1f} s")
    return failures


HISTORY_STRATEGIES = ["DAPO refill+skip", "ours budget k=2", "ours budget+skip k=2", "ours budget+skip k=4"]


def history_sweep(args: argparse.Namespace) -> None:
    """How much history skipping needs: the 50% zero-variance, G=8 cells with larger datasets (fewer epochs)."""
    datasets = [args.dataset, *args.history_datasets]
    cell_args = {size: argparse.Namespace(**{**vars(args), "generations": 8, "dataset": size}) for size in datasets}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        jobs = {
            (family, size, name): pool.submit(screening_run, name, family, 0.5, cell_args[size], 0.0)
            for family in FAMILIES
            for size in datasets
            for name in HISTORY_STRATEGIES
        }
        ledgers = {key: job.result() for key, job in jobs.items()}
    print("\n## Epochs of history: 50% zero-variance, G=8, L=0; completions per informative group (x G) / epochs")
    print(f"{'mix':<8} {'strategy':<22} " + " ".join(f"{str(size) + ' prompts':>16}" for size in datasets))
    for family in FAMILIES:
        for name in HISTORY_STRATEGIES:
            cells = [ledgers[family, size, name] for size in datasets]
            print(
                f"{family:<8} {name:<22} "
                + " ".join(
                    f"{ledger.per_group(8) / 8:>7.2f} / {ledger.visits / size / args.seeds:>5.1f} ep"
                    for ledger, size in zip(cells, datasets)
                )
            )


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the defaults that depend on the mode filled in."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, help="default 200; with --screening 150, with --quick 60")
    parser.add_argument("--groups", type=int, default=32, help="informative groups needed per step")
    parser.add_argument("--generations", type=int, default=8, help="G, completions per group")
    parser.add_argument("--dataset", type=int, help="prompts in the simulated dataset (2048; --screening: 512)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=1, help="independent runs per mix (seed, seed+1, ...), pooled")
    parser.add_argument("--confidence", type=float, default=0.95, help="the confidence rule's RefillPlanner(...)")
    parser.add_argument("--decay", type=float, default=RefillPlanner().decay, help="RefillPlanner(decay=...)")
    parser.add_argument("--window", type=int, default=1, help="PromptHistory(window=...)")
    parser.add_argument("--floor", type=float, default=0.1, help="PromptHistory(floor=...)")
    parser.add_argument("--latencies", type=float, nargs="*", default=LATENCIES, help="round latencies to cost")
    parser.add_argument("--mixes", nargs="*", help="only these mixes (names as printed)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="simulation processes")
    parser.add_argument("--screening", action="store_true", help="the screening / fixed-budget sweep (issue 43)")
    parser.add_argument("--quick", action="store_true", help="with --screening: 50%% zero-variance, G=8 only, L=0/16")
    parser.add_argument("--churn", type=float, default=0.002, help="--screening: chance per step of a new pass rate")
    parser.add_argument("--max-oversample", type=float, default=4.0, help="--screening: prompts per round / batch")
    parser.add_argument("--screen-latencies", type=float, nargs="*", default=SCREEN_LATENCIES)
    parser.add_argument("--history-datasets", type=int, nargs="*", default=[2048, 8192], help="--screening: sizes")
    args = parser.parse_args(argv)
    if args.screening:  # a small dataset: several epochs of history to skip on, as GRESO needs
        args.steps, args.dataset = args.steps or (60 if args.quick else 150), args.dataset or 512
    else:
        args.steps, args.dataset = args.steps or 200, args.dataset or 2048
    return args


def main() -> int:
    args = parse_arguments()
    if args.screening:
        return 1 if screening_sweep(args) else 0
    started = time.perf_counter()
    total_steps = args.steps * args.seeds
    G = args.generations
    print(
        f"G={G}, {args.groups} groups per step, {args.steps} steps, {args.dataset} prompts, seeds "
        f"{args.seed}..{args.seed + args.seeds - 1} pooled; per strategy: generated completions per retained group "
        f"(x the limit G), rounds per step (mean/max), discarded surplus groups per step, exhausted steps; notes: "
        f"prompts never generated, the longest run of steps any prompt went without being generated"
    )
    fixed: dict[str, dict[str, Tally]] = {}  # mix -> strategy -> tally (sizing that ignores the latency)
    aware: dict[str, dict[tuple[str, float], Tally]] = {}  # mix -> (strategy, latency) -> tally
    mixes = [(number, mix) for number, mix in enumerate(MIXES) if not args.mixes or mix.name in args.mixes]
    rows = [(strategy, None) for strategy in STRATEGIES]
    rows += [(strategy, latency) for latency in args.latencies for strategy in COST_AWARE]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:  # every run is independent: one process per core
        futures = {
            (mix.name, strategy, latency): pool.submit(pooled_run, strategy, number, args, latency or 0.0)
            for number, mix in mixes
            for strategy, latency in rows
        }
        tallies = {key: future.result() for key, future in futures.items()}
    floors: dict[str, float] = {}  # mix -> G / mean retention: completions per retained group no sizing beats
    for mix_number, mix in mixes:
        p0 = mix.draw(np.random.default_rng(args.seed * 1000 + mix_number), args.dataset)
        floors[mix.name] = float(
            np.mean([G / expected_retention(probabilities_at(p0, mix, s), G) for s in range(args.steps)])
        )
        start, end = (expected_retention(probabilities_at(p0, mix, s), G) for s in (0, args.steps - 1))
        drift = f" -> {end:.2f} at the last step" if mix.drift_per_step else ""
        print(f"\n## {mix.name}: expected retention {start:.2f}{drift} (no-skipping bound {1 / start:.2f}x G)")
        print(
            f"{'strategy':<20} {'compl/retained':>15} {'x G':>6} {'rounds':>11} {'surplus':>8} {'exhausted':>9}  notes"
        )
        fixed[mix.name] = {}
        aware[mix.name] = {}
        for strategy, latency in rows:
            tally = tallies[mix.name, strategy, latency]
            if latency is None:
                fixed[mix.name][strategy] = tally
                label = strategy
            else:
                aware[mix.name][strategy, latency] = tally
                label = f"{strategy} @{latency:g}"
            per_retained = tally.generated / max(tally.retained, 1)
            rounds = f"{np.mean(tally.rounds):.2f}/{max(tally.rounds)}"
            notes = f"never generated {tally.never_generated}, longest gap {tally.longest_gap} steps"
            if strategy.endswith("+skip"):
                notes += f", skipped {tally.skipped / total_steps:.1f}/step, readmitted {tally.readmitted / total_steps:.1f}/step"
            print(
                f"{label:<20} {per_retained * G:>15.1f} {per_retained:>6.2f} {rounds:>11} "
                f"{tally.surplus / total_steps:>8.1f} {tally.exhausted:>9}  {notes}"
            )

    print(
        "\n## Cost per retained group, in completion-equivalents (seconds when one completion costs 1 s), for a round "
        "latency of L completion-equivalents; cost-aware rows are sized for that L; oracle = the cost-aware sizing "
        "told every prompt's exact retention; floor = G / retention + L / groups, one round and no surplus: no "
        "sizing without skipping does better"
    )
    names = PEERS + ["planner"] + COST_AWARE
    print(
        f"{'mix':<22} {'L':>5} "
        + " ".join(f"{name:>15}" for name in names)
        + f" {'floor':>7} {'vs best peer':>13} {'vs oracle':>10}"
    )
    gains: list[float] = []  # cost-aware vs the best peer, latencies 4..64
    floor_gains: list[float] = []  # the floor vs the best peer: the most any sizing rule could gain there
    failures = 0

    def check(ok: bool, text: str) -> None:
        nonlocal failures
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {text}")

    verdicts = []
    for mix_name in fixed:
        for latency in args.latencies:
            cost = {name: cost_per_retained(fixed[mix_name][name], latency, G) for name in PEERS + ["planner"]}
            cost.update({name: cost_per_retained(aware[mix_name][name, latency], latency, G) for name in COST_AWARE})
            best_peer = min(cost[name] for name in PEERS)
            gap = cost["cost-aware"] / cost["oracle"] - 1
            floor = floors[mix_name] + latency / args.groups
            print(
                f"{mix_name:<22} {latency:>5g} "
                + " ".join(f"{cost[name]:>15.1f}" for name in names)
                + f" {floor:>7.1f} {1 - cost['cost-aware'] / best_peer:>12.1%} {gap:>+9.1%}"
            )
            if latency == 0:
                ratio = cost["cost-aware"] / cost["one-by-one"]
                verdicts.append((ratio <= 1.03, f"{mix_name}, L=0: cost-aware / one-by-one = {ratio:.3f} (<= 1.03)"))
            else:
                verdicts.append(
                    (
                        cost["cost-aware"] <= best_peer,
                        f"{mix_name}, L={latency:g}: cost-aware {cost['cost-aware']:.1f} <= best peer {best_peer:.1f}",
                    )
                )
            if 4 <= latency <= 64:
                gains.append(1 - cost["cost-aware"] / best_peer)
                floor_gains.append(1 - floor / best_peer)
            if mix_name in ("easy-heavy", "hard-heavy"):
                skip = aware[mix_name]["cost-aware+skip", latency]
                completions = G * skip.generated / max(skip.retained, 1)
                verdicts.append(
                    (
                        cost["cost-aware+skip"] < cost["oracle"],
                        f"{mix_name}, L={latency:g}: cost-aware+skip generates {completions:.1f} completions per "
                        f"retained group (no-skipping bound {floors[mix_name]:.1f}) and costs {cost['cost-aware+skip']:.1f} "
                        f"(oracle without skipping {cost['oracle']:.1f})",
                    )
                )
    print("\n## Issue 21 targets")
    for ok, text in verdicts:
        check(ok, text)
    if gains:
        check(
            np.mean(gains) >= 0.10,
            f"cost-aware is {np.mean(gains):.1%} cheaper than the best peer, averaged over mixes at L=4..64 (>= 10%; "
            f"the floor, one round without surplus, is {np.mean(floor_gains):.1%} cheaper)",
        )
    print(f"\n{failures} target(s) missed; {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
