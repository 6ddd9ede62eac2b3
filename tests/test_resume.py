"""Exact resume of dynamic sampling: everything that steers refill is saved beside the trainer's RNG state."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
from test_dynamic_sampling import build, ds_logs, kinds_dataset, record_takes
from transformers import TrainerCallback

from trl_dapo_ext.cli.interrupts import INTERRUPTED_DIR, RunInterrupted, save_on_interrupt
from trl_dapo_ext.dynamic_sampling.state import GENERATION_BUFFER_FILE, REFILL_STATE_FILE
from trl_dapo_ext.metric_names import N

pytestmark = pytest.mark.trainer

# The default planner (oversample=None) with prompt-history skipping on.
RESUME = dict(
    max_steps=4,
    save_strategy="steps",
    save_steps=2,
    dynamic_sampling_skip_window=1,
    dynamic_sampling_skip_floor=0.2,
)


# Measured seconds differ run to run; with a set round latency (the default) they steer nothing.
TIMED = {
    N.DYNAMIC_SAMPLING_GENERATION_SECONDS,
    N.DYNAMIC_SAMPLING_SECONDS_PER_COMPLETION,
    N.DYNAMIC_SAMPLING_MEASURED_ROUND_LATENCY,
}


def steering_state(trainer) -> dict:
    return {**trainer.dynamic_sampling.state_dict(), "micro_step": trainer._step}


def untimed(state: dict) -> dict:
    """The state without the planner's measured round times (they differ run to run)."""
    planner = state["planner"]  # None with screening, which sizes its rounds without the refill planner
    return {**state, "planner": planner and {k: v for k, v in planner.items() if k != "cost_model"}}


def after_checkpoint(trainer, step: int = 2) -> list[dict]:
    """The refill counters and TRL's reward metrics logged after ``step`` (the timings differ run to run)."""
    shared = ("dynamic_sampling/", "reward", "rewards/", "completions/", "frac_reward_zero_std")
    logs = [h for h in ds_logs(trainer) if h["step"] > step]
    return [
        {"step": h["step"], **{k: v for k, v in h.items() if k.startswith(shared) and k not in TIMED}} for h in logs
    ]


def test_resume_is_exact_with_the_default_planner_and_history_skipping(make_model, tokenizer, tmp_path):
    # No always-wrong prompt: the lowest reward seen keeps moving, so a reward range that restarts changes the
    # prompt history's tallies and with them the planner's strata and round sizes.
    dataset = kinds_dataset(["right", "varying", "right"], repeat=8)
    full, _, _ = build(make_model, tokenizer, tmp_path, dataset, **RESUME)
    full_takes = record_takes(full)
    full.train()
    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / REFILL_STATE_FILE).is_file()
    assert sum(h[N.DYNAMIC_SAMPLING_SKIPPED_PROMPTS] for h in ds_logs(full)) > 0

    resumed, _, _ = build(make_model, tokenizer, tmp_path, dataset, **RESUME)
    resumed_takes = record_takes(resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))

    assert resumed_takes == [take for take in full_takes if take[0] >= 2]
    assert after_checkpoint(resumed) == after_checkpoint(full)
    assert untimed(steering_state(resumed)) == untimed(steering_state(full))


class PressCtrlC(TrainerCallback):
    """The user presses Ctrl-C (a real SIGINT) as step ``step`` begins."""

    def __init__(self, step: int):
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            os.kill(os.getpid(), signal.SIGINT)


def test_a_run_stopped_by_ctrl_c_resumes_exactly_like_the_uninterrupted_run(make_model, tokenizer, tmp_path):
    # The resume suite's comparison, with the checkpoint written by Ctrl-C in a run that saves none by itself.
    dataset = kinds_dataset(["right", "varying", "right"], repeat=8)
    full, _, _ = build(make_model, tokenizer, tmp_path / "full", dataset, **RESUME)
    full_takes = record_takes(full)
    full.train()

    stopped, _, _ = build(make_model, tokenizer, tmp_path / "stopped", dataset, **{**RESUME, "save_strategy": "no"})
    stopped.add_callback(PressCtrlC(step=2))
    with pytest.raises(RunInterrupted) as interrupted:
        with save_on_interrupt(stopped, str(tmp_path / "stopped" / INTERRUPTED_DIR)):
            stopped.train()
    checkpoint = tmp_path / "stopped" / "checkpoint-2"  # step 2 finished: the checkpoint is at a step boundary
    assert interrupted.value.resumable and interrupted.value.folder == str(checkpoint)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", REFILL_STATE_FILE):
        assert (checkpoint / name).is_file(), name

    resumed, _, _ = build(make_model, tokenizer, tmp_path / "resumed", dataset, **RESUME)
    resumed_takes = record_takes(resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))

    assert resumed_takes == [take for take in full_takes if take[0] >= 2]
    assert after_checkpoint(resumed) == after_checkpoint(full)
    assert untimed(steering_state(resumed)) == untimed(steering_state(full))
    for (name, ours), theirs in zip(resumed.model.named_parameters(), full.model.parameters()):
        assert torch.equal(ours, theirs), name  # the optimizer's moments were restored too


def test_state_is_written_where_the_rng_state_is_and_a_failed_write_raises(make_model, tokenizer, tmp_path):
    trainer, _, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(["right", "varying"], 12))
    elsewhere = tmp_path / "hyperparameter-trial" / "checkpoint-7"  # not under args.output_dir
    trainer._save_rng_state(str(elsewhere))
    assert (elsewhere / "rng_state.pth").is_file()
    saved = json.loads((elsewhere / REFILL_STATE_FILE).read_text())
    assert saved == json.loads(json.dumps(steering_state(trainer)))

    blocked = tmp_path / "blocked"
    os.makedirs(blocked / REFILL_STATE_FILE)  # a folder where the file should go: the write cannot succeed
    with pytest.raises(OSError, match=REFILL_STATE_FILE):
        trainer._save_rng_state(str(blocked))


def test_one_state_file_per_process_like_the_rng_state():
    from trl_dapo_ext.dynamic_sampling.state import refill_state_file

    assert refill_state_file(process_index=0, world_size=1) == REFILL_STATE_FILE
    assert refill_state_file(process_index=1, world_size=2) == "dapo_refill_state_1.json"


def test_resuming_from_a_checkpoint_without_the_state_warns(make_model, tokenizer, tmp_path):
    dataset = kinds_dataset(["right", "varying"], 12)
    first, _, _ = build(make_model, tokenizer, tmp_path, dataset, max_steps=1, save_strategy="steps", save_steps=1)
    first.train()
    os.remove(tmp_path / "checkpoint-1" / REFILL_STATE_FILE)
    resumed, _, _ = build(make_model, tokenizer, tmp_path, dataset, max_steps=2)
    with pytest.warns(UserWarning, match="refill stream restarts"):
        resumed.train(resume_from_checkpoint=True)


def record_generations(trainer) -> list[tuple[int, list[str]]]:
    """(step, prompts) of every generation batch the trainer generates for, the dataloader's rows only."""
    generations = []
    inner = trainer._generate_and_score_completions

    def recorded(inputs):
        generations.append((trainer.state.global_step, [row["prompt"] for row in inputs]))
        return inner(inputs)

    trainer._generate_and_score_completions = recorded
    return generations


# One generation batch (2 groups of 4) serves two optimizer steps: a checkpoint after an odd step is mid-cycle.
MID_CYCLE = dict(
    max_steps=4, save_strategy="steps", save_steps=1, per_device_train_batch_size=4, steps_per_generation=2
)
# The same cycle from two iterations over one batch (the buffered micro-batch holds old_per_token_logps).
TWO_ITERATIONS = dict(max_steps=4, save_strategy="steps", save_steps=1, num_iterations=2)


@pytest.mark.parametrize("cycle", [MID_CYCLE, TWO_ITERATIONS], ids=["steps_per_generation=2", "num_iterations=2"])
def test_resume_mid_generation_cycle_loses_and_repeats_nothing(make_model, tokenizer, tmp_path, cycle):
    dataset = kinds_dataset(["right", "varying", "wrong"], repeat=8)
    full, _, _ = build(make_model, tokenizer, tmp_path, dataset, **cycle)
    full_takes, full_generations = record_takes(full), record_generations(full)
    full.train()
    assert [step for step, _ in full_generations] == [0, 2]  # the test's premise: step 1 ends mid-cycle
    assert full_takes, "no refill draw: the stream's position would prove nothing"

    resumed, _, _ = build(make_model, tokenizer, tmp_path, dataset, **cycle)
    resumed_takes, resumed_generations = record_takes(resumed), record_generations(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))

    # Step 2 trains the second half of the batch generated before the checkpoint (no generation for it); the next
    # batch is generated after step 2 from the same prompts, refill draws and stream position as without the stop.
    runs = (resumed, full)
    assert resumed_generations == [g for g in full_generations if g[0] >= 1]
    assert resumed_takes == [take for take in full_takes if take[0] >= 1]
    assert after_checkpoint(resumed, step=1) == after_checkpoint(full, step=1)
    assert untimed(steering_state(resumed)) == untimed(steering_state(full))
    losses = [[(h["step"], h["loss"]) for h in t.state.log_history if "loss" in h and h["step"] > 1] for t in runs]
    assert losses[0] == losses[1] and len(losses[0]) == 3
    for (name, ours), theirs in zip(resumed.model.named_parameters(), full.model.parameters()):
        assert torch.equal(ours, theirs), name


def test_resume_mid_cycle_without_the_buffer_warns_and_keeps_the_cycle(make_model, tokenizer, tmp_path):
    dataset = kinds_dataset(["right", "varying", "wrong"], repeat=8)
    first, _, _ = build(make_model, tokenizer, tmp_path, dataset, **{**MID_CYCLE, "max_steps": 1})
    first.train()
    os.remove(tmp_path / "checkpoint-1" / GENERATION_BUFFER_FILE)
    resumed, _, _ = build(make_model, tokenizer, tmp_path, dataset, **MID_CYCLE)
    generations = record_generations(resumed)
    with pytest.warns(UserWarning, match="inside a generation cycle"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    # The rest of the cycle is generated afresh; the next cycle still starts after step 2, as without the stop.
    assert [step for step, _ in generations] == [1, 2]
