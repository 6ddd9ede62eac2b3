"""`trl_dapo_ext.notebook`: the live progress callback and greedy pass@1 used by the Colab notebooks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trl_dapo_ext.notebook import LiveProgress, greedy_pass_at_1


def test_live_progress_prints_one_line_per_logged_step(capsys):
    progress = LiveProgress()  # outside IPython: lines only, no plot
    state = SimpleNamespace(global_step=3, is_world_process_zero=True)
    logs = {"reward": 0.5, "rewards/math_reward/mean": 0.4, "rewards/overlong_penalty/mean": -0.1, "loss": 0.01}
    progress.on_log(None, state, None, logs=logs)
    progress.on_log(None, state, None, logs={"train_runtime": 2.0})  # the end-of-training log has no reward
    progress.on_train_end(None, state, None)
    out = capsys.readouterr().out.splitlines()
    assert out == ["step    3  reward 0.500  math_reward 0.400"]
    assert progress.history == [(3, logs)]


def test_greedy_pass_at_1_slices_reward_columns_and_restores_state(tokenizer, make_model):
    model = make_model(max_positions=128)
    model.train()
    original_side = tokenizer.padding_side  # the fixture is shared by the session
    tokenizer.padding_side = "right"
    try:
        _check_pass_at_1(model, tokenizer)
    finally:
        tokenizer.padding_side = original_side


def _check_pass_at_1(model, tokenizer):
    prompts = [[{"role": "user", "content": f"{i}+1="}] for i in range(5)] + ["plain text prompt"]
    seen = []

    def reward(completions, answer, **kwargs):
        seen.extend(answer)
        return [1.0 if a in {"a0", "a2", "a4"} else 0.0 for a in answer]

    answers = [f"a{i}" for i in range(6)]
    score = greedy_pass_at_1(
        model, tokenizer, prompts[:5], reward, {"answer": answers[:5]}, max_new_tokens=3, batch_size=2
    )
    assert score == 3 / 5 and seen == answers[:5]  # every row scored once, in order, across batches
    assert model.training and tokenizer.padding_side == "right"
    assert greedy_pass_at_1(model, tokenizer, prompts[5:], reward, {"answer": ["a0"]}, max_new_tokens=2) == 1.0


@pytest.mark.trainer
@pytest.mark.parametrize("dynamic_sampling", [False, True])
def test_completions_every_n_steps_logs_the_table_only_on_those_steps(
    make_model, tokenizer, prompt_dataset, tmp_path, capsys, dynamic_sampling
):
    from helpers import digit_fraction_reward, grpo_kwargs

    from trl_dapo_ext import DAPOConfig, DAPOTrainer
    from trl_dapo_ext.notebook import CompletionsEvery

    args = DAPOConfig(**grpo_kwargs(tmp_path, max_steps=5, log_completions=False, dynamic_sampling=dynamic_sampling))
    trainer = DAPOTrainer(
        model=make_model(), reward_funcs=digit_fraction_reward, args=args, train_dataset=prompt_dataset,
        processing_class=tokenizer,
    )  # fmt: skip
    trainer.add_callback(CompletionsEvery(trainer, every=2))
    trainer.train()
    tables = sorted(path.name for path in (tmp_path / "completions").glob("*.parquet"))
    # Steps 2 and 4, and the last step (5); not the others.
    assert tables == ["completions_00002.parquet", "completions_00004.parquet", "completions_00005.parquet"]
    import pandas as pd

    table = pd.read_parquet(tmp_path / "completions" / "completions_00004.parquet")
    assert len(table) == 8 and set(table["step"]) == {4}  # the batch of the step it is logged at
    with pytest.raises(ValueError, match="every must be >= 1"):
        CompletionsEvery(trainer, every=0)
