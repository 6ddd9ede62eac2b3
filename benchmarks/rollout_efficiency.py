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
from trl_dapo_ext.dynamic_sampling.stream import RefillSampler

MAX_ROUNDS = 10  # veRL's max_num_gen_batches and our dynamic_sampling_max_rounds default
VERL_FACTOR = 3  # veRL DAPO recipe: gen_batch_size = train_batch_size * 3


# --- difficulty mixes ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mix:
    name: str
    draw: Callable[[np.random.Generator, int], np.ndarray]  # initial success probability per prompt
    drift_per_step: float = 0.0  # logit shift per step for prompts with 0 < p < 1 (the policy learning)


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--groups", type=int, default=32, help="informative groups needed per step")
    parser.add_argument("--generations", type=int, default=8, help="G, completions per group")
    parser.add_argument("--dataset", type=int, default=2048, help="prompts in the simulated dataset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=1, help="independent runs per mix (seed, seed+1, ...), pooled")
    parser.add_argument("--confidence", type=float, default=0.95, help="the confidence rule's RefillPlanner(...)")
    parser.add_argument("--decay", type=float, default=RefillPlanner().decay, help="RefillPlanner(decay=...)")
    parser.add_argument("--window", type=int, default=1, help="PromptHistory(window=...)")
    parser.add_argument("--floor", type=float, default=0.1, help="PromptHistory(floor=...)")
    parser.add_argument("--latencies", type=float, nargs="*", default=LATENCIES, help="round latencies to cost")
    parser.add_argument("--mixes", nargs="*", help="only these mixes (names as printed)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="simulation processes")
    args = parser.parse_args()
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
