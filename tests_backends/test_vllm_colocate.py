"""vLLM colocate on a CPU: plain `trl.GRPOTrainer`, `DAPOTrainer` with refill rounds, and a LoRA adapter.

The check is TRL's own: ``sampling/sampling_logp_difference/mean``, the gap between the log-probs vLLM sampled with
and the policy's. It stays small only if every weight update reached vLLM before the next generation, and in every
refill round of a step (the rounds must all sample from the policy being trained). Seen failing with
``BACKENDS_BREAK=sync``, ``=refill`` and ``=lora_merge`` (docs/backends.md).
"""

from __future__ import annotations

import pytest
import torch
from backend_helpers import LOGP_TOLERANCE, RoundLog, colocate_kwargs, kind_dataset, kind_reward
from trl import GRPOConfig, GRPOTrainer

from trl_dapo_ext import DAPOConfig, DAPOTrainer


def _snapshot(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _assert_in_sync(log: RoundLog) -> None:
    assert len(log.steps) == 3, log.steps  # one entry per optimizer step
    worst = max(log.values)
    assert worst < LOGP_TOLERANCE, f"vLLM sampled from other weights than the policy's: per-round {log.steps}"


def test_plain_grpo_trainer_keeps_vllm_in_sync(model_dir, tmp_path):
    trainer = GRPOTrainer(
        model_dir,
        reward_funcs=[kind_reward],
        args=GRPOConfig(**colocate_kwargs(tmp_path)),
        train_dataset=kind_dataset(),
    )
    before = _snapshot(trainer.model)
    log = RoundLog(trainer)
    trainer.train()
    moved = max((p.detach() - before[n]).abs().max().item() for n, p in trainer.model.named_parameters())
    assert moved > 1e-3  # the policy changed, so an unsynced vLLM would sample from stale weights
    _assert_in_sync(log)


def test_dapo_refill_rounds_all_sample_from_the_current_policy(model_dir, tmp_path):
    # Half the prompts are zero-variance and round 1 holds only the batch's own prompts: most steps need refill rounds.
    args = DAPOConfig(**colocate_kwargs(tmp_path), dynamic_sampling=True, dynamic_sampling_oversample=1.0)
    trainer = DAPOTrainer(model_dir, reward_funcs=[kind_reward], args=args, train_dataset=kind_dataset())
    log = RoundLog(trainer)
    trainer.train()
    assert [len(step) for step in log.steps] == log.rounds  # one logp value per generation round
    assert max(log.rounds) >= 2, f"no step needed a refill round: {log.rounds}"
    _assert_in_sync(log)


# Refill rounds; and pipelined screening at GRPO's budget, the mode of the LoRA + vLLM colocate recipe.
CHOOSING_MODES = {
    "refill": dict(dynamic_sampling=True, dynamic_sampling_oversample=1.0),
    "pipelined": dict(
        dynamic_sampling=True,
        dynamic_sampling_screen_generations=2,
        dynamic_sampling_fixed_budget=True,
        dynamic_sampling_pipeline=True,
    ),
}


@pytest.mark.parametrize("mode", CHOOSING_MODES)
def test_lora_adapter_through_vllm_colocate(model_dir, tmp_path, mode):
    from peft import LoraConfig

    peft_config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    args = DAPOConfig(**colocate_kwargs(tmp_path), **CHOOSING_MODES[mode])
    trainer = DAPOTrainer(
        model_dir, reward_funcs=[kind_reward], args=args, train_dataset=kind_dataset(), peft_config=peft_config
    )
    before = _snapshot(trainer.model)
    log = RoundLog(trainer)
    trainer.train()
    after = _snapshot(trainer.model)
    adapter = [name for name in before if "lora_" in name]
    base = [name for name in before if "lora_" not in name]
    assert adapter and base
    assert max((after[n] - before[n]).abs().max().item() for n in adapter) > 1e-3  # the adapter learned
    # TRL merged the adapter for every sync and unmerged it again: the frozen base weights are back as they were.
    assert max((after[n] - before[n]).abs().max().item() for n in base) < 1e-5
    _assert_in_sync(log)


def test_vespo_rows_of_narrower_rounds_keep_their_importance_ratio(model_dir, tmp_path):
    """With vLLM, TRL's batch carries the importance-sampling ratio exp((old - sampling) * mask): 1 at padding.
    Rows kept from a round of shorter completions are re-padded to the batch's width, and VESPO sums log(ratio) over
    every position, so the re-padded columns must hold 1 as well (0.0 there zeroed those rows' VESPO weight)."""
    args = DAPOConfig(
        # Completions end at the first of five digits (stop strings), so rounds end at different widths.
        **colocate_kwargs(tmp_path, max_completion_length=12, generation_kwargs={"stop": list("12345")}),
        dynamic_sampling=True,
        dynamic_sampling_oversample=1.0,
        loss_type="vespo",
        vllm_importance_sampling_mode="token_truncate",  # TRL requires a token mode for VESPO
    )
    trainer = DAPOTrainer(model_dir, reward_funcs=[kind_reward], args=args, train_dataset=kind_dataset())
    round_widths: list[list[int]] = []
    batches: list[dict] = []
    scored_round, collect = trainer._scored_round, trainer._generate_and_score_completions

    def recorded_round(rows, need_rewards=True):
        output, scored = scored_round(rows, need_rewards)
        round_widths[-1].append(output["completion_ids"].shape[1])
        return output, scored

    def recorded_step(inputs):
        round_widths.append([])
        batch = collect(inputs)
        batches.append({key: value.clone() for key, value in batch.items() if torch.is_tensor(value)})
        return batch

    trainer._scored_round, trainer._generate_and_score_completions = recorded_round, recorded_step
    trainer.train()
    repadded = [min(widths) < batch["completion_ids"].shape[1] for widths, batch in zip(round_widths, batches)]
    assert any(repadded), f"no step kept rows of a narrower round: widths per round {round_widths}"
    for batch in batches:
        padding = batch["completion_mask"] == 0
        assert torch.all(batch["importance_sampling_ratio"][padding] == 1.0)
        mask = batch["completion_mask"].float()
        phi = GRPOTrainer.get_gamma_weights(
            batch["advantages"].unsqueeze(1), torch.zeros_like(mask), mask, batch["importance_sampling_ratio"]
        )
        assert phi.min() > 1e-3, f"a row lost its VESPO weight: {phi.flatten().tolist()}"


def test_screening_probes_and_completes_through_vllm(model_dir, tmp_path):
    """Screening with vLLM colocate: rounds of 2-row probes and 2-row completions (TRL's groups are the probes'
    size for those rounds), every round sampling from the current policy, and each kept group whole."""
    args = DAPOConfig(**colocate_kwargs(tmp_path), dynamic_sampling=True, dynamic_sampling_screen_generations=2)
    trainer = DAPOTrainer(model_dir, reward_funcs=[kind_reward], args=args, train_dataset=kind_dataset())
    log = RoundLog(trainer)
    trainer.train()
    assert [len(step) for step in log.steps] == log.rounds and min(log.rounds) >= 2  # probes, then completions
    _assert_in_sync(log)
    logs = [h for h in trainer.state.log_history if "dynamic_sampling/screened_prompts" in h]
    for h in logs:
        assert h["dynamic_sampling/screened_prompts"] > h["dynamic_sampling/completed_prompts"] >= 2
        assert h["dynamic_sampling/retained_groups"] == 2


def test_pipelined_screening_through_vllm(model_dir, tmp_path):
    """Pipelined screening with vLLM colocate: one call per step after the first, every call sampling from the
    current policy, and carried probe rows trained at the next step with the old log-probabilities and importance
    ratios computed at their own call."""
    args = DAPOConfig(
        **colocate_kwargs(tmp_path, max_steps=4),
        dynamic_sampling=True,
        dynamic_sampling_screen_generations=2,
        dynamic_sampling_fixed_budget=True,
        dynamic_sampling_pipeline=True,
    )
    trainer = DAPOTrainer(model_dir, reward_funcs=[kind_reward], args=args, train_dataset=kind_dataset())
    log = RoundLog(trainer)
    batches: list[dict] = []
    collect = trainer._generate_and_score_completions

    def recorded_step(inputs):
        batch = collect(inputs)
        batches.append({key: value.clone() for key, value in batch.items() if torch.is_tensor(value)})
        return batch

    trainer._generate_and_score_completions = recorded_step
    trainer.train()
    assert [len(step) for step in log.steps] == log.rounds and log.rounds[1:-1] == [1, 1]
    assert max(log.values) < LOGP_TOLERANCE, f"vLLM sampled from other weights than the policy's: {log.steps}"
    logs = [h for h in trainer.state.log_history if "dynamic_sampling/carried_probes" in h]
    assert (
        all(h["dynamic_sampling/carried_probes"] > 0 for h in logs[:-1])
        and logs[-1]["dynamic_sampling/carried_probes"] == 0
    )
    assert all(h["dynamic_sampling/stale_row_share"] > 0 for h in logs[1:])
    for batch in batches:  # TRL's vLLM correction, as computed at each row's call
        assert {"old_per_token_logps", "importance_sampling_ratio"} <= set(batch)
        assert len(batch["importance_sampling_ratio"]) == len(batch["completion_ids"])  # one per row (sequence mode)
