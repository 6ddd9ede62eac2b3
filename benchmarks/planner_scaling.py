"""Decision time of the cost-aware RefillPlanner against the groups each process needs, and the expected-cost gap
of the fast search (shortfalls above ``RefillPlanner.exact_up_to`` groups) to the direct one, in one run.

The planner state: ``RefillPlanner(round_latency=16)`` after 5 observed steps at retention 1/2,
``first_round(n, rounds_left=10)``, then round 1 observed with a shortfall of n/8 and ``next_round(n/8,
rounds_left=9)``. "new" is the default planner; "old" the same planner with ``exact_up_to`` raised past every size,
which is the direct search of before (run up to ``--exact-max`` groups: it grows about as n^2.6). Each timing is
the median of ``--repeats`` calls on fresh planners with the Beta-Binomial cache cleared; old and new alternate so
that machine noise hits both. "gap" is the new plan's expected cost over the old one's, minus 1.

    python benchmarks/planner_scaling.py [--sizes 8 16 ... 4096] [--repeats 5] [--exact-max 512]

Target: <= 20 ms per decision at 2048 groups. Timings are wall-clock medians, with the new planner's CPU time
beside them (what the process itself spent: less sensitive to other processes on the machine). Timings on a
shared machine are noisy; compare the old/new ratio within one run. Run with ``OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from trl_dapo_ext.dynamic_sampling.planner import RefillPlanner
from trl_dapo_ext.dynamic_sampling.retention import cached_beta_binomial_head


def fresh(groups: int, exact: bool) -> RefillPlanner:
    planner = RefillPlanner(round_latency=16)
    if exact:
        planner.exact_up_to = 10**9
    for _ in range(5):
        planner.step_target = groups
        planner.observe(attempted=2 * groups, informative=groups)
        planner.end_step()
    return planner


def decide(groups: int, exact: bool) -> tuple[float, float, float, float, float, float]:
    """Seconds of first_round and next_round, the two plans' expected costs, then the two calls' CPU seconds."""
    cached_beta_binomial_head.cache_clear()
    planner = fresh(groups, exact)
    start, cpu = time.perf_counter(), time.process_time()
    refill = planner.first_round(groups, rounds_left=10)
    first, first_cpu = time.perf_counter() - start, time.process_time() - cpu
    first_cost = planner.step_expected_cost
    planner.observe(attempted=groups + refill, informative=(groups + refill) // 2 - groups // 8)
    start, cpu = time.perf_counter(), time.process_time()
    planner.next_round(max(groups // 8, 1), rounds_left=9)
    second, second_cpu = time.perf_counter() - start, time.process_time() - cpu
    return first, second, first_cost, planner._plan[0], first_cpu, second_cpu


def median(runs: list, column: int) -> float:
    return statistics.median(run[column] for run in runs)


def ms(runs: list, column: int) -> str:
    return f"{1e3 * median(runs, column):.1f} ms" if runs else "-"


def ratio(value: float) -> str:
    """A speed-up with enough digits below 10 that a slowdown reads as one (0.3x, not 0x)."""
    return f"{value:.0f}x" if value >= 10 else f"{value:.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--exact-max", type=int, default=512, help="largest size the old direct search is run at")
    args = parser.parse_args()
    print(
        "| groups per process | new `first_round` | new `next_round` | new CPU first / next "
        "| old `first_round` | old `next_round` | old/new first | old/new next | gap first | gap next |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for groups in args.sizes:
        new, old = [], []
        for _ in range(args.repeats):
            new.append(decide(groups, exact=False))
            if groups <= args.exact_max:
                old.append(decide(groups, exact=True))

        gaps = [f"{new[0][c] / old[0][c] - 1:+.1e}" if old else "-" for c in (2, 3)]
        ratios = [ratio(median(old, c) / median(new, c)) if old else "-" for c in (0, 1)]
        print(
            f"| {groups} | {ms(new, 0)} | {ms(new, 1)} | {ms(new, 4)} / {ms(new, 5)} | {ms(old, 0)} | {ms(old, 1)} "
            f"| {ratios[0]} | {ratios[1]} | {gaps[0]} | {gaps[1]} |"
        )


if __name__ == "__main__":
    main()
