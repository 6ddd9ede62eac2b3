"""Preflight checks before a run: pure parts (no torch, no TRL) of ``trl-dapo check-reward | profile | estimate``.

* :mod:`.battery`: the check-reward battery built from a dataset's golds, and its per-category table;
* :mod:`.difficulty`: pass rates, zero-variance shares at a group size, retention, the planner's cost per group;
* :mod:`.memory`: generated tokens per step and GPU memory per process from a model config and a recipe.

The command-line glue (loading models, datasets and reward functions) lives in ``trl_dapo_ext/cli/``.
"""
