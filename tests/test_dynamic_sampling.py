"""Dynamic sampling with refill on a tiny model, with a reward that is constant for a known subset of prompts."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from statistics import mean, stdev

import pytest
import torch
from datasets import Dataset, IterableDataset
from helpers import grpo_kwargs, tiny_trainer
from transformers import TrainerCallback

from trl_dapo_ext import DAPOConfig, DynamicSamplingExhausted, RewardFunctionError
from trl_dapo_ext.dynamic_sampling.rounds import PROMPT_INDEX_COLUMN
from trl_dapo_ext.dynamic_sampling.state import REFILL_STATE_FILE
from trl_dapo_ext.metric_names import N

pytestmark = pytest.mark.trainer

G = 4


def kinds_dataset(kinds: list[str], repeat: int = 1) -> Dataset:
    """Prompts named after their kind: 'right' always scores 1, 'wrong' always 0, 'varying' varies in (0, 1)."""
    rows = [(f"{kind[0]}{i}:", kind) for i, kind in enumerate(kinds * repeat)]
    return Dataset.from_dict({"prompt": [p for p, _ in rows], "kind": [k for _, k in rows]})


class KindReward:
    """Reward by the prompt's kind; records the kinds of every call (one call per generation round)."""

    __name__ = "kind_reward"

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, completions, kind, **kwargs):
        self.calls.append(list(kind))
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        # A pseudo-random value of the text: four random completions almost surely differ.
        varying = [(sum(map(ord, t)) % 89 + 1) / 91 for t in texts]
        return [{"right": 1.0, "wrong": 0.0}.get(k, v) for k, v in zip(kind, varying)]


class BatchRecorder:
    """Keeps every update batch the trainer hands to TRL's buffering (after dynamic sampling)."""

    def __init__(self, trainer):
        self.batches = []
        inner = trainer._generate_and_score_completions

        def recorded(inputs):
            batch = inner(inputs)
            self.batches.append({k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()})
            return batch

        trainer._generate_and_score_completions = recorded


def build(make_model, tokenizer, tmp_path, dataset, reward=None, model=None, **overrides):
    overrides.setdefault("dynamic_sampling", True)
    reward = reward or KindReward()
    trainer = tiny_trainer(model or make_model(seed=2), reward, dataset, tokenizer, tmp_path, **overrides)
    return trainer, reward, BatchRecorder(trainer)


def prompt_kinds(batch, tokenizer) -> list[str]:
    texts = tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
    return [{"r": "right", "w": "wrong", "v": "varying"}[t[0]] for t in texts]


def ds_logs(trainer) -> list[dict]:
    return [h for h in trainer.state.log_history if N.DYNAMIC_SAMPLING_ROUNDS in h]


def test_only_informative_groups_are_trained(make_model, tokenizer, tmp_path):
    dataset = kinds_dataset(["right", "wrong", "varying"], repeat=8)
    trainer, reward, recorder = build(make_model, tokenizer, tmp_path, dataset, max_steps=3)
    trainer.train()

    assert len(recorder.batches) == 3
    for batch in recorder.batches:
        assert batch["completion_ids"].shape[0] == 8  # exactly per_device_train_batch_size * steps_per_generation
        assert prompt_kinds(batch, tokenizer) == ["varying"] * 8
        groups = batch["advantages"].view(-1, G)
        assert torch.all(groups.abs().sum(dim=1) > 0), "a retained group has no contrast"
        assert batch["num_items_in_batch"].item() == batch["completion_mask"].sum().item()

    # Counters add up, and they match what the reward function actually saw.
    attempted_kinds = [kind for call in reward.calls for kind in call[::G]]
    logs = ds_logs(trainer)
    assert len(logs) == 3
    assert sum(h[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS] for h in logs) == len(attempted_kinds)
    assert sum(h[N.DYNAMIC_SAMPLING_ALL_MAX_GROUPS] for h in logs) == attempted_kinds.count("right")
    assert sum(h[N.DYNAMIC_SAMPLING_ALL_MIN_GROUPS] for h in logs) == attempted_kinds.count("wrong")
    for h in logs:
        assert h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] == 2
        assert h[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS] == (
            h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS]
            + h[N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS]
            + h[N.DYNAMIC_SAMPLING_ZERO_VARIANCE_GROUPS]
        )
        assert h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] == G * h[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS]
        assert h[N.DYNAMIC_SAMPLING_RETENTION_RATE] == pytest.approx(2 / h[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS])
        assert h[N.DYNAMIC_SAMPLING_FILLED_GROUPS] == 0
        # TRL's own metrics describe the retained batch: no zero-variance group, and only varying rewards.
        assert h["frac_reward_zero_std"] == 0.0
        assert 0.0 < h["reward"] < 1.0
    # Refill prompts were generated (in round 1 by the planner's oversampling, or in later rounds).
    assert sum(h[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS] for h in logs) > 3 * 2, "no refill: the test would prove little"


def test_recomputed_trl_metrics_match_trl_when_every_group_is_informative(make_model, tokenizer, tmp_path):
    # With only varying prompts, round 1 is the update batch, so our recomputation must equal TRL's own values.
    dataset = kinds_dataset(["varying"], repeat=24)
    plain, _, _ = build(make_model, tokenizer, tmp_path / "a", dataset, dynamic_sampling=False, max_steps=2)
    plain.train()
    sampled, _, _ = build(make_model, tokenizer, tmp_path / "b", dataset, max_steps=2, dynamic_sampling_oversample=1.0)
    sampled.train()
    keys = [
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "rewards/kind_reward/mean",
        "rewards/kind_reward/std",
        "completions/mean_length",
        "completions/clipped_ratio",
        "completions/mean_terminated_length",
        "loss",
    ]
    for ours, theirs in zip(ds_logs(sampled), [h for h in plain.state.log_history if "reward" in h]):
        assert ours[N.DYNAMIC_SAMPLING_ROUNDS] == 1
        for key in keys:
            assert ours[key] == pytest.approx(theirs[key], rel=1e-6, abs=1e-7), key


def test_exhausted_budget_raises_with_counts(make_model, tokenizer, tmp_path):
    dataset = kinds_dataset(["right", "wrong"], repeat=12)
    trainer, _, _ = build(make_model, tokenizer, tmp_path, dataset, dynamic_sampling_max_rounds=3)
    with pytest.raises(DynamicSamplingExhausted, match=r"budget of 3 generation rounds .* 0 informative") as error:
        trainer.train()
    assert "dynamic_sampling_on_exhausted='fill'" in str(error.value)


@pytest.mark.parametrize(
    ("kinds", "says"),
    [
        (["wrong"], "the same reward, 0: if that is a fail, every group was all wrong"),
        (["right"], "the same reward, 1:"),
        (["wrong", "right"], "Of 16 groups, "),
    ],
)
def test_no_informative_group_says_whether_all_were_wrong_or_right(make_model, tokenizer, tmp_path, kinds, says):
    dataset = kinds_dataset(kinds, repeat=24)
    trainer, _, _ = build(make_model, tokenizer, tmp_path, dataset, dynamic_sampling_max_rounds=2)
    with pytest.raises(DynamicSamplingExhausted, match="0 informative") as error:
        trainer.train()
    assert says in str(error.value) and "trl-dapo check-reward" in str(error.value)


def test_fill_masks_filled_groups_out_of_the_loss(make_model, tokenizer, tmp_path):
    # One varying prompt in twelve, one round: the batch (2 groups) cannot be filled with informative groups.
    dataset = kinds_dataset(["varying"] + ["right"] * 5 + ["wrong"] * 6, repeat=2)
    trainer, _, recorder = build(
        make_model,
        tokenizer,
        tmp_path,
        dataset,
        dynamic_sampling_max_rounds=1,
        dynamic_sampling_on_exhausted="fill",
        max_steps=3,
    )
    with pytest.warns(UserWarning, match="masked out of the loss") as caught:
        trainer.train()
    assert sum("masked out of the loss" in str(w.message) for w in caught) == 1  # warned once

    logs = ds_logs(trainer)
    assert sum(h[N.DYNAMIC_SAMPLING_FILLED_GROUPS] for h in logs) > 0
    for batch, h in zip(recorder.batches, logs):
        assert batch["completion_ids"].shape[0] == 8
        kinds = prompt_kinds(batch, tokenizer)
        assert h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] + h[N.DYNAMIC_SAMPLING_FILLED_GROUPS] == 2
        if h[N.DYNAMIC_SAMPLING_FILLED_GROUPS] == 0:
            continue
        filled = torch.tensor([kind != "varying" for kind in kinds])
        assert torch.all(batch["tool_mask"][filled] == 0)
        assert torch.all(batch["tool_mask"][~filled] == 1)
        assert torch.all(batch["advantages"][filled] == 0)
        loss_tokens = (batch["completion_mask"] * batch["tool_mask"]).sum()
        assert batch["num_items_in_batch"].item() == loss_tokens.item() < batch["completion_mask"].sum().item()


def test_resume_continues_the_refill_stream(make_model, tokenizer, tmp_path):
    dataset = kinds_dataset(["right", "wrong", "varying"], repeat=8)
    common = dict(max_steps=4, save_strategy="steps", save_steps=2, dynamic_sampling_oversample=1.5)

    full, _, _ = build(make_model, tokenizer, tmp_path / "full", dataset, **common)
    taken_full = record_takes(full)
    full.train()
    saved = json.loads((tmp_path / "full" / "checkpoint-2" / REFILL_STATE_FILE).read_text())["refill"]
    assert saved["taken"] > 0

    resumed, _, _ = build(make_model, tokenizer, tmp_path / "full", dataset, **common)
    taken_resumed = record_takes(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))

    # The resumed run draws exactly what the uninterrupted run drew after its step-2 checkpoint.
    after_checkpoint = [t for t in taken_full if t[1] >= saved["taken"]]
    assert taken_resumed[0][1] == saved["taken"]
    assert taken_resumed == after_checkpoint


@pytest.mark.parametrize("skip_window", [0, 2])
def test_unshuffled_refills_continue_the_dataset_order_without_repeating_a_prompt(
    make_model, tokenizer, tmp_path, skip_window
):
    """shuffle_dataset=False (a curriculum): each step's refills are the prompts right after the dataloader's batch,
    in dataset order, and no prompt is generated twice in one step (once its own prompts, then as a refill)."""
    dataset = kinds_dataset(["right", "varying", "wrong"], repeat=8)  # 24 prompts; 2 of 3 kinds zero-variance
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        dataset,
        shuffle_dataset=False,
        max_steps=4,
        dynamic_sampling_oversample=2.0,
        dynamic_sampling_on_exhausted="fill",
        dynamic_sampling_skip_window=skip_window,
        dynamic_sampling_skip_floor=0.0,
    )
    per_step: dict[int, list[int]] = defaultdict(list)  # dataset indices of every group generated, per step
    scored_round = trainer._scored_round

    def recorded(rows, need_rewards=True):
        prompts = [row["prompt"] for row in rows][::G]
        per_step[trainer.state.global_step].extend(dataset["prompt"].index(prompt) for prompt in prompts)
        return scored_round(rows, need_rewards)

    trainer._scored_round = recorded
    trainer.train()
    groups = trainer.args.per_device_train_batch_size // G
    for step, indices in per_step.items():
        own, refills = indices[:groups], indices[groups:]
        assert own == list(range(step * groups, (step + 1) * groups))  # TRL's unshuffled dataloader
        assert len(set(indices)) == len(indices), f"step {step} generated a prompt twice: {indices}"
        if skip_window == 0:  # consecutive after the batch's last prompt (skipping passes some over)
            assert refills == [(own[-1] + 1 + k) % len(dataset) for k in range(len(refills))], (step, indices)
        else:
            assert refills == sorted(refills, key=lambda index: (index - own[-1] - 1) % len(dataset)), (step, indices)
    assert sum(len(indices) > groups for indices in per_step.values()) >= 2  # refill rounds took place


def test_shuffled_refills_never_repeat_a_prompt_of_their_step(make_model, tokenizer, tmp_path):
    """The shuffled refill stream is independent of the dataloader: it must still skip the batch's own prompts and
    its own earlier draws of the step, or a batch could hold two groups of one prompt."""
    dataset = kinds_dataset(["right", "varying", "wrong"], repeat=4)  # 12 prompts: collisions would be common
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        dataset,
        max_steps=6,
        dynamic_sampling_oversample=3.0,
        dynamic_sampling_on_exhausted="fill",
    )
    per_step: dict[int, list[str]] = defaultdict(list)
    scored_round = trainer._scored_round

    def recorded(rows, need_rewards=True):
        per_step[trainer.state.global_step].extend(row["prompt"] for row in rows[::G])
        return scored_round(rows, need_rewards)

    trainer._scored_round = recorded
    trainer.train()
    for step, prompts in per_step.items():
        assert len(set(prompts)) == len(prompts), f"step {step} generated a prompt twice: {prompts}"


def test_num_tokens_counts_prompt_and_completion_tokens_of_every_round(make_model, tokenizer, tmp_path):
    """docs/metrics.md: TRL's num_tokens is a running total of prompt and completion tokens of every generation
    call, so with dynamic sampling it includes the rounds' discarded groups."""
    dataset = kinds_dataset(["right", "wrong", "varying"], repeat=8)
    trainer, _, _ = build(make_model, tokenizer, tmp_path, dataset, max_steps=3, dynamic_sampling_oversample=1.0)
    tokens = []  # per round: prompt and completion tokens, every row
    scored_round = trainer._scored_round

    def recorded(rows, need_rewards=True):
        output, scored = scored_round(rows, need_rewards)
        tokens.append(int(output["prompt_mask"].sum() + output["completion_mask"].sum()))
        return output, scored

    trainer._scored_round = recorded
    trainer.train()
    logs = ds_logs(trainer)
    assert sum(h[N.DYNAMIC_SAMPLING_ROUNDS] for h in logs) == len(tokens) > len(logs)  # some step refilled
    assert logs[-1]["num_tokens"] == sum(tokens)


def record_takes(trainer) -> list[tuple[int, int, list[int]]]:
    """(step, position before the take, indices) of every draw from the refill stream."""
    takes = []
    sampler = trainer.dynamic_sampling.stream
    cls = type(sampler)

    def take(self, count):
        position = self.taken
        indices = cls.take(self, count)
        if self is trainer.dynamic_sampling.stream:  # not the copies a round's preview draws from
            takes.append((trainer.state.global_step, position, list(indices)))
        return indices

    # A subclass, not an instance attribute: `copy.copy(stream)` (a preview) would copy a bound method that draws
    # from this stream, and the preview would advance the real one.
    sampler.__class__ = type("RecordingSampler", (cls,), {"take": take})
    return takes


def batch_rewards(batch, tokenizer) -> list[float]:
    """The rewards of a batch's rows, recomputed from its decoded completions as KindReward scores them."""
    texts = tokenizer.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    return KindReward()(completions=texts, kind=prompt_kinds(batch, tokenizer))


def groups_of(values: list[float]) -> list[list[float]]:
    return [values[start : start + G] for start in range(0, len(values), G)]


EPS = 1e-4  # the stabiliser TRL adds to every standard deviation it divides by


def hand_grpo(rewards: list[float]) -> list[float]:
    """(r - group mean) / (group sample std + eps): TRL's default advantages (DeepSeekMath Sec. 4.1.2)."""
    return [(r - mean(g)) / (stdev(g) + EPS) for g in groups_of(rewards) for r in g]


def hand_loo_batch(rewards: list[float]) -> list[float]:
    """(r - mean of the 3 other siblings) / (sample std of the whole batch + eps): RLOO with scale_rewards="batch"."""
    spread = stdev(rewards)
    return [(r - (sum(g) - r) / (G - 1)) / (spread + EPS) for g in groups_of(rewards) for r in g]


def hand_normalize_then_sum(rewards: list[float]) -> list[float]:
    """One reward function: standardise within each group, then standardise the result over the batch (GDPO)."""
    within = [(r - mean(g)) / (stdev(g) + EPS) for g in groups_of(rewards) for r in g]
    return [(z - mean(within)) / (stdev(within) + EPS) for z in within]


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({"gradient_accumulation_steps": 2, "num_iterations": 2}, hand_grpo),
        ({"scale_rewards": "batch", "advantage_estimator": "loo"}, hand_loo_batch),
        ({"multi_objective_aggregation": "normalize_then_sum", "loss_type": "grpo"}, hand_normalize_then_sum),
    ],
    ids=["ga2-mu2", "batch-loo", "normalize-then-sum"],
)
def test_works_with_accumulation_iterations_and_batch_statistics(make_model, tokenizer, tmp_path, overrides, expected):
    dataset = kinds_dataset(["right", "varying", "wrong", "varying"], repeat=6)
    trainer, _, recorder = build(make_model, tokenizer, tmp_path, dataset, max_steps=2, **overrides)
    trainer.train()
    rows = 8 * trainer.args.steps_per_generation
    assert recorder.batches and all(b["completion_ids"].shape[0] == rows for b in recorder.batches)
    for batch in recorder.batches:
        assert set(prompt_kinds(batch, tokenizer)) == {"varying"}
        assert batch["num_items_in_batch"].item() == batch["completion_mask"].sum().item()
        # Batch statistics are those of the retained batch, not of the rounds it was picked from.
        want = torch.tensor(expected(batch_rewards(batch, tokenizer)))
        torch.testing.assert_close(batch["advantages"], want, rtol=1e-5, atol=1e-5, check_dtype=False)


def test_lora_model(make_model, tokenizer, tmp_path):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(make_model(seed=2), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    dataset = kinds_dataset(["right", "varying"], repeat=12)
    trainer, _, recorder = build(
        make_model, tokenizer, tmp_path, dataset, model=model, max_steps=2, learning_rate=1e-2
    )
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    lora = {name for name in before if ".lora_" in name}
    assert {name for name, p in model.named_parameters() if p.requires_grad} == lora
    assert len(lora) == 4  # lora_A and lora_B of q_proj and v_proj in the one layer
    trainer.train()
    assert len(recorder.batches) == 2
    after = dict(model.named_parameters())
    # The adapters learnt (lora_B starts at 0, so lora_A's first gradient is 0: two steps move both) ...
    assert [name for name in sorted(lora) if torch.equal(before[name], after[name])] == []
    # ... and the base model, embeddings and head included, is exactly what it was.
    assert [name for name in sorted(set(before) - lora) if not torch.equal(before[name], after[name])] == []


def test_overlong_penalty_never_makes_a_group_informative(make_model, tokenizer, tmp_path):
    # Constant task reward + length penalty: the shaped reward varies, the task reward does not.
    dataset = kinds_dataset(["right"], repeat=24)
    trainer, _, _ = build(
        make_model, tokenizer, tmp_path, dataset, overlong_buffer_length=6, dynamic_sampling_max_rounds=2
    )
    with pytest.raises(DynamicSamplingExhausted, match="0 informative"):
        trainer.train()


def test_progress_is_reported_while_refilling(make_model, tokenizer, tmp_path, caplog):
    dataset = kinds_dataset(["right", "varying", "wrong"], repeat=8)
    trainer, _, _ = build(make_model, tokenizer, tmp_path, dataset, max_steps=1)
    with caplog.at_level(logging.DEBUG, logger="trl_dapo_ext.dynamic_sampling"):
        trainer.train()
    messages = [r.getMessage() for r in caplog.records if "groups retained" in r.getMessage()]
    assert messages and messages[-1].endswith("2/2 groups retained")
    assert messages[0].startswith("dynamic sampling: round 1/10, ")


def test_reward_function_that_raises_names_the_step(make_model, tokenizer, tmp_path):
    def broken_reward(completions, **kwargs):
        raise KeyError("answer")

    trainer, _, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(["varying"], 24), reward=broken_reward)
    with pytest.raises(RewardFunctionError, match=r"'broken_reward' raised at training step 1: KeyError") as error:
        trainer.train()
    assert isinstance(error.value.__cause__, KeyError)


def test_configuration_errors(make_model, tokenizer, tmp_path):
    with pytest.raises(ValueError, match="could never fill a batch"):
        build(make_model, tokenizer, tmp_path, kinds_dataset(["varying"]))
    iterable = IterableDataset.from_generator(lambda: iter([{"prompt": "a", "kind": "varying"}] * 24))
    with pytest.raises(ValueError, match="needs a map-style dataset"):
        build(make_model, tokenizer, tmp_path, iterable, max_steps=1)
    with pytest.raises(ValueError, match="not a reward function here"):
        build(make_model, tokenizer, tmp_path, kinds_dataset(["varying"], 24), dynamic_sampling_reward_funcs=["acc"])
    with pytest.raises(ValueError, match="overlong length penalty"):
        build(
            make_model,
            tokenizer,
            tmp_path,
            kinds_dataset(["varying"], 24),
            overlong_buffer_length=4,
            dynamic_sampling_reward_funcs=["overlong_penalty"],
        )
    # On one process TRL's own check (generation batch divisible by G) already implies whole groups; on two
    # processes with 6 rows each a group of 4 would straddle them. Emulate that layout after construction.
    config = DAPOConfig(**grpo_kwargs(tmp_path, dynamic_sampling=True))
    config.per_device_train_batch_size, config.steps_per_generation = 6, 1
    with pytest.raises(ValueError, match="not a multiple of num_generations=4"):
        config._validate_dynamic_sampling_fields()
    for field, value in [
        ("dynamic_sampling_max_rounds", 0),
        ("dynamic_sampling_oversample", 0.5),
        ("dynamic_sampling_std_tolerance", -1.0),
        ("dynamic_sampling_on_exhausted", "skip"),
        ("dynamic_sampling_round_latency", -1.0),
        ("dynamic_sampling_round_latency", float("inf")),
        ("dynamic_sampling_confidence", 1.0),
    ]:
        with pytest.raises(ValueError, match=field):
            DAPOConfig(**grpo_kwargs(tmp_path, dynamic_sampling=True, **{field: value}))


def test_checkpoint_holds_the_refill_state(make_model, tokenizer, tmp_path):
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["right", "varying"], 12),
        max_steps=2,
        save_strategy="steps",
        save_steps=1,
    )
    draws: list[tuple[int, int]] = []  # (step, refill prompts drawn)
    draw = trainer.dynamic_sampling.draw

    def counted(*args, **kwargs):
        indices = draw(*args, **kwargs)
        draws.append((trainer.state.global_step, len(indices)))
        return indices

    trainer.dynamic_sampling.draw = counted
    at_save: dict[int, dict] = {}  # the sampler's state when each checkpoint was written

    class Snapshot(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            at_save[state.global_step] = json.loads(json.dumps(trainer.dynamic_sampling.state_dict()))

    trainer.add_callback(Snapshot())
    trainer.train()
    assert sorted(at_save) == [1, 2]
    for step in (1, 2):
        saved = json.loads((tmp_path / f"checkpoint-{step}" / REFILL_STATE_FILE).read_text())
        assert {key: saved[key] for key in at_save[step]} == at_save[step]  # every part, value for value
        assert saved["micro_step"] == step  # TRL's micro-step count: one per step here
        refill = saved["refill"]
        drawn = sum(count for at_step, count in draws if at_step < step)
        assert drawn > 0 and refill["taken"] == drawn and refill["seed"] == trainer.args.seed
        assert (refill["epoch"], refill["position"]) == divmod(drawn, 24)  # one shuffled pass over 24 prompts each
        assert saved["reward_range"][1] == 1.0 and 0.0 < saved["reward_range"][0] < 1.0  # "right" and "varying"
        assert saved["planner"]["estimates"] and saved["history"]


def test_adaptive_planner_and_prompt_history(make_model, tokenizer, tmp_path):
    # Two of three prompts are constant: after their first visit the history skips them (floor 0 for the test).
    dataset = kinds_dataset(["right", "wrong", "varying"], repeat=8)
    # The fill-chance rule's large first rounds walk the refill stream past every prompt within 6 steps.
    skipping = dict(
        max_steps=6, dynamic_sampling_skip_window=1, dynamic_sampling_skip_floor=0.0, dynamic_sampling_confidence=0.95
    )
    trainer, reward, recorder = build(
        make_model, tokenizer, tmp_path, dataset, save_strategy="steps", save_steps=6, **skipping
    )
    planner = trainer.dynamic_sampling.planner
    planned_with = []  # the pooled estimate as each step's first round is planned (earlier steps only)
    first_round = planner.first_round
    planner.first_round = lambda *a, **k: planned_with.append(planner.expected_retention()) or first_round(*a, **k)
    trainer.train()
    logs = ds_logs(trainer)
    assert [h[N.DYNAMIC_SAMPLING_EXPECTED_RETENTION] for h in logs] == planned_with
    assert planned_with[0] == 0.5 and len(set(planned_with)) > 2  # the prior, then what the steps taught it
    for h in logs:  # the realised quantity it estimates: every informative group, kept or surplus
        informative = h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] + h[N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS]
        assert h[N.DYNAMIC_SAMPLING_INFORMATIVE_RATE] == informative / h[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS]
    assert sum(h[N.DYNAMIC_SAMPLING_SKIPPED_PROMPTS] for h in logs) > 0
    assert all(set(prompt_kinds(b, tokenizer)) == {"varying"} for b in recorder.batches)
    # Skipped prompts are never generated: the refill groups of later steps are mostly the varying prompts.
    late_refill_kinds = [kind for call in reward.calls[-3:] for kind in call[2 * G :: G]]
    assert late_refill_kinds.count("varying") > len(late_refill_kinds) / 2
    state = json.loads((tmp_path / "checkpoint-6" / REFILL_STATE_FILE).read_text())
    assert state["planner"] is not None and state["history"] is not None

    resumed, _, _ = build(make_model, tokenizer, tmp_path, dataset, **skipping)
    resumed.dynamic_sampling.load_state_dict(state)
    assert resumed.dynamic_sampling.planner.state_dict() == trainer.dynamic_sampling.planner.state_dict()
    assert resumed.dynamic_sampling.history.state_dict() == trainer.dynamic_sampling.history.state_dict()
    assert resumed.dynamic_sampling.stream.state_dict() == trainer.dynamic_sampling.stream.state_dict()


def test_completions_table_shows_the_update_batch(make_model, tokenizer, tmp_path):
    dataset = kinds_dataset(["right", "wrong", "varying"], repeat=8)
    trainer, _, recorder = build(make_model, tokenizer, tmp_path, dataset, max_steps=1, log_completions=True)
    trainer.train()
    logs = trainer._logs
    assert len(logs["prompt"]) == 8  # the update batch, not the last rounds' attempts
    assert all(prompt.startswith("v") for prompt in logs["prompt"])
    # same rows in the same order as the batch handed to TRL (before its shuffle)
    assert list(logs["advantages"]) == pytest.approx(recorder.batches[0]["advantages"].tolist(), abs=1e-6)
    assert len(logs["rewards"]["kind_reward"]) == 8


def test_the_batch_own_prompts_feed_the_history_and_the_planner_strata(make_model, tokenizer, tmp_path):
    """Every generated prompt (the dataloader's and the refill's) is recorded under its dataset index; the index
    column that carries it never reaches a reward function."""
    seen_keys: set[str] = set()
    generated: set[str] = set()

    class Recording(KindReward):
        def __call__(self, prompts, completions, kind, **kwargs):
            seen_keys.update(kwargs)
            generated.update(p[-1]["content"] if isinstance(p, list) else p for p in prompts)
            return super().__call__(completions, kind, **kwargs)

    dataset = kinds_dataset(["right", "wrong", "varying"], repeat=8)
    # The fill-chance rule's large first rounds visit the varying prompts often enough to rank them in 8 steps.
    trainer, _, _ = build(
        make_model, tokenizer, tmp_path, dataset, reward=Recording(), max_steps=8, dynamic_sampling_confidence=0.95
    )
    trainer.train()
    assert PROMPT_INDEX_COLUMN not in seen_keys
    assert PROMPT_INDEX_COLUMN in trainer.train_dataset.column_names
    index_of = {prompt: i for i, prompt in enumerate(dataset["prompt"])}
    history = trainer.dynamic_sampling.history
    assert set(history.outcomes) == {index_of[p] for p in generated}
    last_code = {"right": "H", "wrong": "L", "varying": "I"}  # all right, all wrong, informative
    assert all(history.outcomes[i][-1:] == last_code[dataset[i]["kind"]] for i in history.outcomes)
    # Every generated prompt has a tally of its completions (upper half of the reward range vs lower), and the
    # prediction built on it separates the varying prompts from the constant ones.
    assert set(history.tallies) == set(history.outcomes)
    for index, (upper, lower) in history.tallies.items():
        kind = dataset[index]["kind"]
        assert (kind != "right" or lower == 0) and (kind != "wrong" or upper == 0)
    predicted = {i: history.predicted_retention(i) for i in history.tallies}
    varying = [p for i, p in predicted.items() if dataset[i]["kind"] == "varying"]
    constant = [p for i, p in predicted.items() if dataset[i]["kind"] != "varying"]
    assert min(varying) > 0.5 > max(constant)
    # The planner learnt a rate per stratum (prediction bucket): high where the varying prompts are, 0 elsewhere.
    # (Strata the planner has observed: a prompt's last group may have moved it to a bucket not generated from yet.)
    planner = trainer.dynamic_sampling.planner
    by_kind = {
        kind: {history.stratum(i) for i in history.tallies if dataset[i]["kind"] == kind} & set(planner.estimates)
        for kind in last_code
    }
    assert "unseen" in planner.estimates and all(by_kind.values())
    assert not by_kind["varying"] & (by_kind["right"] | by_kind["wrong"])
    assert min(planner.expected_retention(s) for s in by_kind["varying"]) > 0.5
    assert max(planner.expected_retention(s) for s in by_kind["right"] | by_kind["wrong"]) < 0.5


def test_an_existing_index_column_is_refused(make_model, tokenizer, tmp_path):
    dataset = kinds_dataset(["right", "varying"], 4).add_column(PROMPT_INDEX_COLUMN, list(range(8)))
    with pytest.raises(ValueError, match=PROMPT_INDEX_COLUMN):
        build(make_model, tokenizer, tmp_path, dataset)


def realised_cost(log: dict, num_processes: int) -> float:
    """What a step's rounds cost in completion-equivalents: the planner's cost is per process (each process
    generates its share of every round), ``generated_completions`` counts every process's."""
    completions = log[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] / num_processes
    return log[N.DYNAMIC_SAMPLING_ROUNDS] * log[N.DYNAMIC_SAMPLING_ROUND_LATENCY] + completions


@pytest.mark.parametrize("measure", [False, True])
def test_cost_aware_planner_logs_expected_and_realised_cost(make_model, tokenizer, tmp_path, measure):
    # Two of three prompts constant: most steps need refill rounds of different sizes (the cost fit's evidence).
    dataset = kinds_dataset(["right", "wrong", "varying"], repeat=8)
    trainer, reward, _ = build(
        make_model, tokenizer, tmp_path, dataset, max_steps=4, dynamic_sampling_measure_latency=measure
    )
    trainer.train()
    logs = ds_logs(trainer)
    planner = trainer.dynamic_sampling.planner
    assert planner.confidence is None  # the default sizes rounds by their cost
    for h in logs:
        latency = h[N.DYNAMIC_SAMPLING_ROUND_LATENCY]
        assert latency == 16.0 or measure
        assert h[N.DYNAMIC_SAMPLING_REALISED_COST] == pytest.approx(
            realised_cost(h, trainer.accelerator.num_processes)
        )
        assert h[N.DYNAMIC_SAMPLING_EXPECTED_COST] > 0 and 0.0 <= h[N.DYNAMIC_SAMPLING_PLANNED_FILL_CHANCE] <= 1.0
        assert h[N.DYNAMIC_SAMPLING_GENERATION_SECONDS] > 0
    # Every round's time reached the cost model: one observation per generation call.
    assert len(planner.cost_model.rounds) == len(reward.calls)
    if measure:
        assert logs[-1][N.DYNAMIC_SAMPLING_ROUND_LATENCY] == planner.cost_model.latency()  # the measured value steers
