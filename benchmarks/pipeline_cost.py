"""What pipelined screening costs per optimizer step, against GRPO and screening within the step (issue 51, item 6).

Runs `ablation.py`'s arms with its own runner and records (one process per run, one torch thread, the seed's warm
start shared by its arms, one run at a time, arms interleaved by seed) on the mixed task, where most of GRPO's groups
are all right or all wrong:

* arm 3, GRPO as a user would otherwise run it (DAPO's token-level loss and clip-higher, every group trained on): the
  reference every ratio is taken against, seed by seed;
* arm 9, screening k=4 at GRPO's budget, several generation calls per step (probes, then completions);
* arm 10, the same pipelined: one call per step completes the previous call's probes and probes the next step's.

Per run, from the record's cumulative per-step counters (`ablation.PER_STEP_COLUMNS`), after the first ``--skip``
steps (the first step of a pipelined run screens within itself, with nothing carried): generation calls per step, CPU
seconds of the training process per step (held-out evaluations excluded; the pipelined arm's extra no-grad forward
pass over its rows included) and the longest-completion decode tokens per step; over the whole run, completions per
informative group. Then a modelled GPU time per step, two ways (`run_costs`): decode-bound, where a call costs its
prefill plus the decode of its longest completion whatever its batch size (a batched call below saturation), and the
planner's round-cost model (`trl_dapo_ext.dynamic_sampling.round_cost`: ``dynamic_sampling_round_latency``'s default
per call plus one per completion). On the mixed task completions are at most 6 tokens and every arm generates GRPO's
completions per step, so both reduce to counting calls.

    PYTHONPATH=. python benchmarks/pipeline_cost.py --output runs/pipeline_cost            # 3 seeds x arms 3 9 10
    PYTHONPATH=. python benchmarks/pipeline_cost.py --output runs/pipeline_cost --save benchmarks/results
    PYTHONPATH=. python benchmarks/pipeline_cost.py --table benchmarks/results/pipeline_cost.json  # the table again

``--save DIR`` writes ``DIR/pipeline_cost.json`` (the records, without their accuracy curves) and
``DIR/pipeline_cost.md`` (the table, which docs/dynamic-sampling.md quotes); with ``--breakdown`` (the arms' CPU time
per step split by part, on the first seed, in runs with process-time meters around the trainer's methods),
``DIR/pipeline_cost_breakdown.md``.

    PYTHONPATH=. python benchmarks/pipeline_cost.py --output runs/breakdown --breakdown --seeds 0 --save benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import ablation  # beside this script; sets the one-thread environment before torch loads

REFERENCE_ARM = 3
ARMS = [REFERENCE_ARM, 9, 10]
SEEDS = [0, 1, 2]
BUDGET = 64_000  # the ablation's default budget: 500 GRPO steps of 16 prompts x 8
SKIP = 10
# The arms as this comparison names them (ablation.py's names are steps of DAPO's cumulative table).
NAMES = {
    1: "GRPO as TRL documents it",
    3: "GRPO with DAPO's loss and clip-higher (reference)",
    9: "screening k=4 at GRPO's budget, within the step",
    10: "pipelined screening k=4 at GRPO's budget",
}
TASK = "mixed"
# What a record keeps in the saved results file: the cost counters, not the accuracy curves.
KEPT = (
    "arm",
    "arm_name",
    "seed",
    "budget",
    "completions",
    "optimizer_steps",
    "generation_calls",
    "generation_calls_logged",
    "decode_steps",
    "cpu_s",
    "wall_s",
    "informative_groups",
    "per_step",
    "machine",
    "jobs",
    "threads",
    "task",
)


def round_latency() -> float:
    """The planner's default fixed cost of a round, in completion-equivalents (``DAPOConfig``'s own default)."""
    from trl_dapo_ext import DAPOConfig

    return float(DAPOConfig.__dataclass_fields__["dynamic_sampling_round_latency"].default)


def steady_costs(record: dict, skip: int = SKIP) -> dict[str, float]:
    """Per optimizer step after the first ``skip`` steps: completions, generation calls, decode tokens, CPU and wall
    seconds (differences of the record's cumulative per-step counters).

    >>> rows = [[128 * s, 2 * s, 12 * s, 0.5 * s, 1.0 * s] for s in range(1, 21)]
    >>> cols = ["completions", "generation_calls", "decode_steps", "cpu_s", "wall_s"]
    >>> steady_costs({"per_step": {"columns": cols, "values": rows}}, skip=10)
    {'completions': 128.0, 'generation_calls': 2.0, 'decode_steps': 12.0, 'cpu_s': 0.5, 'wall_s': 1.0}
    """
    columns, values = record["per_step"]["columns"], record["per_step"]["values"]
    if len(values) <= skip:
        raise ValueError(f"a run of {len(values)} steps has no steps after the first {skip}")
    first, last, steps = values[skip - 1] if skip else [0.0] * len(columns), values[-1], len(values) - skip
    return {name: (last[i] - first[i]) / steps for i, name in enumerate(columns)}


def run_costs(record: dict, latency: float, skip: int = SKIP) -> dict[str, float]:
    """`steady_costs`, completions per informative group (whole run) and the modelled GPU time per step, two ways:

    * ``decode_bound``: a call costs its prefill (one forward step over short prompts) plus the decode of its longest
      completion (the record's ``decode_steps`` add each call's longest), whatever its batch size: a batched call on
      a GPU below saturation;
    * ``round_cost``: the planner's model, ``latency`` per call plus one per completion (completion-equivalents).
    """
    costs = steady_costs(record, skip)
    costs["per_informative_group"] = record["completions"] / record["informative_groups"]
    costs["decode_bound"] = costs["generation_calls"] + costs["decode_steps"]
    costs["round_cost"] = latency * costs["generation_calls"] + costs["completions"]
    return costs


FORMATS = dict(
    completions=".1f",
    generation_calls=".2f",
    cpu_s=".3f",
    per_informative_group=".1f",
    decode_steps=".1f",
)


def _cell(values: list[float], fmt: str) -> str:
    """Mean over seeds and, for several, their range."""
    mean = format(statistics.fmean(values), fmt)
    if len(values) < 2:
        return mean
    return f"{mean} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def summary_table(results: dict) -> str:
    """The markdown table: per arm, the mean over seeds (range) of each cost, and its ratio to the reference arm's
    measured on the same seed."""
    runs, plan, latency, skip = results["runs"], results["plan"], results["latency"], results["skip"]
    by = {(r["arm"], r["seed"]): run_costs(r, latency, skip) for r in runs}
    arms = sorted({r["arm"] for r in runs}, key=lambda a: (a != REFERENCE_ARM, a))
    seeds = sorted({r["seed"] for r in runs})
    names = {r["arm"]: NAMES.get(r["arm"], r["arm_name"]) for r in runs}
    machines = sorted({(r["machine"]["cpu"], r["machine"]["cores"], r["machine"]["kernel_path"]) for r in runs})
    lines = [
        f"Task {plan['task']}, budget {plan['budget']:,} generated completions per run "
        f"({plan['demo']['prompts_per_step']} prompts x {plan['demo']['num_generations']} per step), seeds "
        f"{', '.join(map(str, seeds))}; per-step costs after the first {skip} steps; mean over seeds (range); "
        f"ratios to arm {REFERENCE_ARM} on the same seed. Modelled GPU time per step, decode-bound: each call costs its "
        "prefill (1) plus the decode steps of its longest completion; round-cost: the planner's model, "
        f"{latency:g} per call plus 1 per completion.",
        f"Machine: {'; '.join(f'{cpu}, {cores} cores, kernel path {path}' for cpu, cores, path in machines)}; one "
        "torch thread, one run at a time, shared with other work (CPU seconds are the run's process time).",
        "",
        "| arm | optimizer steps | completions per step | generation calls per step | CPU s per step "
        "| CPU vs GRPO | completions per informative group | longest-completion decode steps per step "
        "| modelled GPU vs GRPO: decode-bound | round-cost |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    steps = {(r["arm"], r["seed"]): r["optimizer_steps"] for r in runs}
    for arm in arms:
        mine = [s for s in seeds if (arm, s) in by]
        paired = [s for s in mine if (REFERENCE_ARM, s) in by]
        cells = {key: _cell([by[arm, s][key] for s in mine], fmt) for key, fmt in FORMATS.items()}
        ratios = {
            key: _cell([by[arm, s][key] / by[REFERENCE_ARM, s][key] for s in paired], ".2f") if paired else "-"
            for key in ("cpu_s", "decode_bound", "round_cost")
        }
        lines.append(
            f"| {arm} {names[arm]} | {_cell([steps[arm, s] for s in mine], '.0f')} | {cells['completions']} "
            f"| {cells['generation_calls']} | {cells['cpu_s']} | {ratios['cpu_s']} | {cells['per_informative_group']} "
            f"| {cells['decode_steps']} | {ratios['decode_bound']} | {ratios['round_cost']} |"
        )
    return "\n".join(lines) + "\n"


# --- where the CPU time goes ----------------------------------------------------------------------------------------

# The parts a training step's CPU time is split into (process seconds, evaluations excluded), innermost first.
PARTS = {
    "generate": "model.generate inside the step's generation calls",
    "old_logps": "the no-grad forward pass over the rows carried to the next step (`_record_old_logps`)",
    "collect": "the rest of generation and scoring: rewards, the collector, planner and batch assembly",
    "loss": "the loss forward and backward (training_step less its generation)",
    "rest": "optimizer step, scheduler, callbacks and logging (train time less training_step)",
}


def timed_run(output: str, arm: int, seed: int, plan: dict) -> dict:
    """`ablation.train_arm` with process-time meters around the trainer's parts (`PARTS`); returns the record with
    ``parts`` (CPU seconds per part, whole run)."""
    import time

    import transformers

    from trl_dapo_ext import DAPOTrainer

    spent = dict.fromkeys(["generate", "old_logps", "generation", "training_step"], 0.0)
    inside = {"generation": False}

    def meter(owner: type, name: str, part: str) -> None:
        """Adds ``name``'s process time to ``spent[part]``: the generation cycle's only in training (not the
        held-out evaluation), ``generate`` only inside a training generation cycle."""
        original = getattr(owner, name)

        def wrapped(self, *args, **kwargs):
            counted = inside["generation"] if part == "generate" else True
            opens = part == "generation" and getattr(self.model, "training", False)
            counted = counted and (part != "generation" or opens)
            inside["generation"] = inside["generation"] or opens
            started = time.process_time()
            try:
                return original(self, *args, **kwargs)
            finally:
                if counted:
                    spent[part] += time.process_time() - started
                if opens:
                    inside["generation"] = False

        setattr(owner, name, wrapped)

    meter(DAPOTrainer, "_generate_and_score_completions", "generation")
    meter(DAPOTrainer, "_record_old_logps", "old_logps")
    meter(DAPOTrainer, "training_step", "training_step")
    meter(transformers.GenerationMixin, "generate", "generate")
    record = ablation.train_arm(output, arm, seed, plan, 1)
    record["parts"] = dict(
        generate=spent["generate"],
        old_logps=spent["old_logps"],
        collect=spent["generation"] - spent["generate"] - spent["old_logps"],
        loss=spent["training_step"] - spent["generation"],
        rest=record["cpu_s"] - spent["training_step"],
    )
    return record


def breakdown(output: Path, arms: list[int], seed: int, budget: int) -> str:
    """`timed_run` of each arm (one spawned process each, one at a time) and a table of CPU ms per step per part."""
    from concurrent.futures import ProcessPoolExecutor
    from dataclasses import asdict
    from multiprocessing import get_context

    plan = ablation.make_plan(ablation.Options(output=output, task=TASK, budget=budget, eval_every=budget))
    output.mkdir(parents=True, exist_ok=True)
    records = []
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"), max_tasks_per_child=1) as pool:
        if not (ablation.warm_dir(output, seed) / "warm.json").exists():
            pool.submit(ablation.warm_start_seed, str(output), seed, asdict(plan)).result()
        for arm in arms:
            records.append(pool.submit(timed_run, str(output), arm, seed, asdict(plan)).result())
    lines = [
        f"CPU ms per optimizer step by part (task {TASK}, seed {seed}, budget {budget:,}, whole run):",
        "",
        "| arm | steps | " + " | ".join(PARTS) + " | total |",
        "|---|---:|" + "---:|" * (len(PARTS) + 1),
    ]
    for r in records:
        per_step = [1000 * r["parts"][part] / r["optimizer_steps"] for part in PARTS]
        cells = " | ".join(f"{v:.0f}" for v in per_step)
        lines.append(f"| {r['arm']} | {r['optimizer_steps']} | {cells} | {sum(per_step):.0f} |")
    lines += ["", *(f"* {part}: {what}" for part, what in PARTS.items())]
    return "\n".join(lines) + "\n"


def kept(record: dict) -> dict[str, Any]:
    """A record as the saved results file keeps it."""
    return {key: record[key] for key in KEPT if key in record}


def dump(saved: dict) -> str:
    """The saved results as JSON, one line per run (the per-step counters make a run long)."""
    runs = ",\n  ".join(json.dumps(r) for r in saved["runs"])
    head = json.dumps({key: value for key, value in saved.items() if key != "runs"})[:-1]
    return f'{head}, "runs": [\n  {runs}\n]}}\n'


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, help="the ablation folder: warm starts, runs, results.json")
    parser.add_argument("--arms", type=int, nargs="+", default=ARMS, help=f"default {ARMS} (the reference first)")
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    parser.add_argument("--budget", type=int, default=BUDGET, help=f"completions per run (default {BUDGET:,})")
    parser.add_argument("--skip", type=int, default=SKIP, help="first steps left out of the per-step costs")
    parser.add_argument("--save", type=Path, help="write DIR/pipeline_cost.json and DIR/pipeline_cost.md")
    parser.add_argument("--table", type=Path, help="print the table of a saved pipeline_cost.json; run nothing")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="instead: CPU time per step by part (generation, the extra forward pass, collector, loss, the rest) "
        "for each arm on the first seed, with meters around the trainer's methods",
    )
    ns = parser.parse_args(argv)
    if ns.table is None and ns.output is None:
        parser.error("--output is required (or --table FILE)")
    if REFERENCE_ARM not in ns.arms:
        parser.error(f"the ratios need arm {REFERENCE_ARM} (GRPO): add it to --arms")
    if ns.budget < 1 or ns.skip < 0:
        parser.error("--budget must be >= 1 and --skip >= 0")
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = parse(sys.argv[1:] if argv is None else argv)
    if ns.table is not None:
        print(summary_table(json.loads(ns.table.read_text())), end="")
        return 0
    if ns.breakdown:
        table = breakdown(ns.output, ns.arms, ns.seeds[0], ns.budget)
        print(table, end="")
        if ns.save is not None:
            ns.save.mkdir(parents=True, exist_ok=True)
            (ns.save / "pipeline_cost_breakdown.md").write_text(table)
        return 0
    # One evaluation, at the end: the accuracies are not what this measures, and evaluations are left out of the
    # CPU and wall time anyway.
    options = ablation.Options(output=ns.output, task=TASK, budget=ns.budget, eval_every=ns.budget)
    plan = ablation.make_plan(options)
    results, failures = ablation.run_all(ns.output, plan, ns.arms, ns.seeds, jobs=1)
    ablation.attach_informative_groups(results, ns.output)
    wanted = [r for r in results["runs"] if r["arm"] in ns.arms and r["seed"] in ns.seeds]
    saved = dict(plan=results["plan"], latency=round_latency(), skip=ns.skip, runs=[kept(r) for r in wanted])
    table = summary_table(saved)
    print(table, end="")
    if ns.save is not None:
        ns.save.mkdir(parents=True, exist_ok=True)
        (ns.save / "pipeline_cost.json").write_text(dump(saved))
        (ns.save / "pipeline_cost.md").write_text(table)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
