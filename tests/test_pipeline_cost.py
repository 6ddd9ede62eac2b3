"""`benchmarks/pipeline_cost.py` (issue 51): the per-step costs it derives from the ablation's records, and the docs
quoting its saved results (the table remade from the records, then found verbatim in docs/dynamic-sampling.md)."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest
from helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
bench = load_benchmark("pipeline_cost")
ablation = load_benchmark("ablation")


def record(arm: int, seed: int, calls: list[int], cpu: list[float], informative: int = 10) -> dict:
    """A record of ``len(calls)`` steps of 128 completions and 5 decode tokens per call."""
    values, total_calls, total_cpu = [], 0, 0.0
    for step, (c, t) in enumerate(zip(calls, cpu), start=1):
        total_calls, total_cpu = total_calls + c, total_cpu + t
        values.append([128 * step, total_calls, 5 * total_calls, total_cpu, 2 * total_cpu])
    return dict(
        arm=arm,
        arm_name=ablation.ARMS[arm].name,
        seed=seed,
        completions=128 * len(calls),
        optimizer_steps=len(calls),
        informative_groups=informative,
        per_step=dict(columns=list(ablation.PER_STEP_COLUMNS), values=values),
        machine=dict(cpu="cpu", cores=2, kernel_path="avx2"),
    )


def test_the_doctests_hold():
    assert doctest.testmod(bench).failed == 0


def test_costs_per_step_leave_out_the_first_steps_and_ratios_pair_seeds():
    plan = dict(task="mixed", budget=128 * 14, demo=dict(prompts_per_step=16, num_generations=8))
    runs = [
        record(3, 0, [1] * 14, [1.0] * 14),
        record(3, 1, [1] * 14, [2.0] * 14),
        # two calls and 3 s in the first step (left out), then one call and 1.2 / 2.2 s a step
        record(10, 0, [2, 1, 1, 1] + [1] * 10, [3.0] + [1.2] * 13, informative=8),
        record(10, 1, [2, 1, 1, 1] + [1] * 10, [3.0] + [2.2] * 13, informative=8),
    ]
    costs = bench.run_costs(runs[2], latency=16.0, skip=4)
    assert costs["generation_calls"] == 1.0 and costs["cpu_s"] == pytest.approx(1.2)
    assert costs["per_informative_group"] == 128 * 14 / 8 and costs["round_cost"] == 16.0 + 128
    assert costs["decode_bound"] == 1 + 5  # a prefill and the 5 decode steps of the call's longest completion
    table = bench.summary_table(dict(plan=plan, latency=16.0, skip=4, runs=runs))
    row = next(line for line in table.splitlines() if line.startswith("| 10 "))
    assert "| 1.00 (1.00-1.00) |" in row  # one call a step after the first 4
    assert "| 1.15 (1.10-1.20) |" in row  # 1.2 / 1 and 2.2 / 2, per seed
    with pytest.raises(ValueError, match="no steps after the first 20"):
        bench.steady_costs(runs[0], skip=20)


def test_the_docs_quote_the_saved_results():
    """benchmarks/results/pipeline_cost.md is what the records beside it give, and docs/dynamic-sampling.md quotes
    its table whole."""
    saved = _saved()
    table = (RESULTS / "pipeline_cost.md").read_text()
    assert table == bench.summary_table(saved), "stale benchmarks/results/pipeline_cost.md"
    page = (ROOT / "docs" / "dynamic-sampling.md").read_text()
    assert table.strip() in page, "docs/dynamic-sampling.md does not quote benchmarks/results/pipeline_cost.md whole"
    assert {r["seed"] for r in saved["runs"]} == {0, 1, 2} and saved["plan"]["task"] == "mixed"
    breakdown = (RESULTS / "pipeline_cost_breakdown.md").read_text()
    rows = breakdown[breakdown.index("| arm |") : breakdown.index("\n\n*")]
    assert rows in page, "docs/dynamic-sampling.md does not quote benchmarks/results/pipeline_cost_breakdown.md"


def test_the_docs_figures_are_the_saved_tables():
    """The prose's figures (calls, CPU ratios, completions per informative group, modelled GPU) are the table's."""
    page = (ROOT / "docs" / "dynamic-sampling.md").read_text()
    section = page[page.index("### Pipelined screening") : page.index("## Prompt-history skipping")]
    section = " ".join(section.replace("\n  ", " ").split())  # the prose's line breaks and list indents
    rows = {line.split(" | ")[0][2:4].strip(): line.split(" | ") for line in _table(RESULTS / "pipeline_cost.md")}
    pipelined, within = rows["10"], rows["9"]
    first = lambda cell: cell.split(" ")[0]  # noqa: E731  (the mean, before the range)
    assert f"**Generation calls: {first(pipelined[3])} per step**" in section
    assert f"Screening within the step made {float(first(within[3])):.1f} calls per step" in section
    assert (
        f"**CPU time: {first(pipelined[5])} times GRPO's** ({pipelined[5].split('(')[1].rstrip(')')} over seeds"
        in section
    )
    assert f"Screening within the step costs {first(within[5])} times" in section
    assert f"**Completions per informative group: {first(pipelined[6])} for pipelined screening**" in section
    assert f"against {first(within[6])} for screening within the step and {first(rows['3'][6])} for GRPO" in section
    costs = {(r["arm"], r["seed"]): bench.run_costs(r, 16.0)["per_informative_group"] for r in _saved()["runs"]}
    seeds = ", ".join(f"{costs[10, s]:.1f} against {costs[9, s]:.1f}" for s in (0, 1, 2))
    assert f"on every seed (seeds 0, 1, 2: {seeds})" in section
    assert all(costs[10, s] <= costs[9, s] for s in (0, 1, 2))
    assert f"screening within the step {first(within[8])} times" in section
    assert f"or {first(within[9])} times (round-cost)" in section


def test_the_docs_breakdown_figures_are_the_saved_breakdown():
    """The prose under the breakdown table: the extra pass, its share of GRPO's step, the collector's extra time,
    screening's extra generation time, and the pipelined step without the pass, from the saved rows."""
    page = (ROOT / "docs" / "dynamic-sampling.md").read_text()
    prose = " ".join(page[page.index("Pipelined screening's extra time is") :].split())
    rows = [line.strip("| ").split(" | ") for line in _table(RESULTS / "pipeline_cost_breakdown.md")]
    table = {row[0]: [float(cell) for cell in row[1:]] for row in rows}  # steps, generate, ... total
    grpo, within = table["3"], table["9"]
    _, _, old_logps, collect, _, _, total = table["10"]
    assert f"the extra forward pass ({old_logps:.0f} ms a step, {old_logps / grpo[6]:.0%} of GRPO's step)" in prose
    assert f"the collector's bookkeeping ({collect - grpo[3]:.0f} ms)" in prose
    assert f"pays {within[1] - grpo[1]:.0f} ms more of it" in prose
    assert f"about {(total - old_logps) / grpo[6]:.2f} times GRPO's" in prose


def _saved() -> dict:
    return json.loads((RESULTS / "pipeline_cost.json").read_text())


def _table(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("| ") and not line.startswith("| arm")]
