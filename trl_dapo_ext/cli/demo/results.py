"""The demo's results: the before/after table it prints and ``demo_results.json``."""

from __future__ import annotations

import json
from pathlib import Path

from .evaluation import Evaluation
from .settings import DemoSettings


def print_table(before: Evaluation, results: dict, settings: DemoSettings) -> None:
    """The held-out accuracies after the warm start and after each RL stage; with --compare, the gain per cost."""
    print()
    print(f"held-out accuracy ({settings.held_out} problems)   greedy   sampled   pass@{before.k}")
    print(f"  after warm start               {before.greedy:7.1%}  {before.sampled:7.1%}  {before.pass_at_k:7.1%}")
    for name, result in results.items():
        after = result["after"]
        label = "after RL, DAPO features" if name == "dapo" else "after RL, plain GRPO"
        print(f"  {label:<30} {after['greedy']:7.1%}  {after['sampled']:7.1%}  {after['pass_at_k']:7.1%}")
    if len(results) > 1:
        print()
        print("same RL steps             sampled gain  per 1k completions  per RL minute  zero-variance groups")
        for name, result in results.items():
            gain = (result["after"]["sampled"] - before.sampled) * 100
            print(
                f"  {name:<22} {gain:+10.1f} pt  {gain / result['generated'] * 1000:+15.2f} pt  "
                f"{gain / (result['rl_seconds'] / 60):+10.2f} pt  {result['frac_zero_variance_attempted']:17.1%}"
            )


def save_results(output: Path, summary: dict) -> None:
    """Writes ``summary`` to ``output/demo_results.json`` and says where the report and results are."""
    (output / "demo_results.json").write_text(json.dumps(summary, indent=2))
    print(
        f"report: {output / 'report.png'}    results: {output / 'demo_results.json'}    "
        f"wall time: {summary['wall_seconds']:.0f} s"
    )
