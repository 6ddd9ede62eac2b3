"""Screening (``dynamic_sampling_screen_generations``) and the fixed per-step budget on a tiny model.

A prompt is probed with k completions; only a prompt whose probes differ is completed to a group of G, in the next
round of the same step. The reward is the prompt's kind ('right' 1, 'wrong' 0, 'varying' pseudo-random), so which
prompts are mixed is known.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
from helpers import grpo_kwargs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_dynamic_sampling import G, build, ds_logs, kinds_dataset, prompt_kinds
from test_fill_loss import LOSS_TYPES, assert_same_gradients, gradients, move_off_policy, without_rows
from test_resume import after_checkpoint, steering_state
from trl import GRPOTrainer

from trl_dapo_ext import DAPOConfig
from trl_dapo_ext.dynamic_sampling import screening_rounds
from trl_dapo_ext.dynamic_sampling.retention import RetentionEstimate
from trl_dapo_ext.dynamic_sampling.screen_plan import screening_round, wanted_probes
from trl_dapo_ext.metric_names import N, expected_names

pytestmark = pytest.mark.trainer

K = 2  # probes per prompt; G = 4: a completion is one more unit of 2
SCREEN = dict(dynamic_sampling_screen_generations=K)
KINDS = ["right", "wrong", "varying"]


def parameter_digest(model) -> str:
    return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()


def record_rounds(trainer) -> list[dict]:
    """Per generation round: the step, the rows' prompts, and the policy's parameters when it generated."""
    rounds = []
    scored_round = trainer._scored_round

    def recorded(rows, need_rewards=True):
        rounds.append(
            {
                "step": trainer.state.global_step,
                "prompts": [row["prompt"] for row in rows],
                "policy": parameter_digest(trainer.model),
                "group_size": trainer.num_generations,
            }
        )
        return scored_round(rows, need_rewards)

    trainer._scored_round = recorded
    return rounds


# --- the round plan --------------------------------------------------------------------------------------------


def test_wanted_probes_by_hand():
    # 3 groups missing at a mixed rate of 0.25: 12 prompts to screen; an estimate of 0 still plans a finite round
    assert wanted_probes(3, 0.25) == 12 and wanted_probes(1, 0.0) == 20 and wanted_probes(-1, 0.5) == 0


@settings(max_examples=300, deadline=None)
@given(
    processes=st.integers(1, 4),
    units_to_complete=st.integers(0, 5),
    data=st.data(),
)
def test_rounds_are_equal_hold_every_completion_and_respect_the_reserve(processes, units_to_complete, data):
    pending = data.draw(st.lists(st.integers(0, 6), min_size=processes, max_size=processes))
    missing = data.draw(st.lists(st.integers(-2, 10), min_size=processes, max_size=processes))
    budget = data.draw(st.one_of(st.none(), st.integers(max(pending) * units_to_complete, 80)))
    may_screen = data.draw(st.booleans())
    probes = screening_round(
        missing=missing,
        pending=pending,
        units_to_complete=units_to_complete,
        mixed_rate=data.draw(st.floats(0.0, 1.0)),
        may_screen=may_screen,
        budget_units=budget,
    )
    units = {done * units_to_complete + new for done, new in zip(pending, probes)}
    assert len(units) == 1 and min(probes) >= 0  # every process generates as many rows; completions first
    if not may_screen:
        assert units == {max(pending) * units_to_complete}  # no probe without a round to complete it
    elif budget is not None:
        (round_units,) = units
        assert round_units <= budget  # the collector trims pending completions to the budget first
        if round_units > max(pending) * units_to_complete:  # probes asked for, not forced by equal rounds
            # each process's completions, plus each new probe with the completion it may need, fit the budget
            for done, new in zip(pending, probes):
                assert done * units_to_complete + new * (1 + units_to_complete) <= budget


# --- the trainer -----------------------------------------------------------------------------------------------


def test_groups_are_completed_by_the_policy_that_probed_them(make_model, tokenizer, tmp_path):
    trainer, _, recorder = build(make_model, tokenizer, tmp_path, kinds_dataset(KINDS, 8), max_steps=3, **SCREEN)
    rounds = record_rounds(trainer)
    trainer.train()
    by_step: dict[int, list[dict]] = {}
    for entry in rounds:
        by_step.setdefault(entry["step"], []).append(entry)
    assert all(len(step) >= 2 for step in by_step.values())  # probes, then completions
    for step in by_step.values():
        assert len({entry["policy"] for entry in step}) == 1  # no optimizer step between a step's rounds
        assert {entry["group_size"] for entry in step} == {K}  # TRL saw rounds of k-row groups
    policies = [step[0]["policy"] for step in by_step.values()]
    assert len(set(policies)) == len(policies)  # ... and one between steps
    for batch in recorder.batches:  # whole groups of one prompt, only the varying kind
        prompts = tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
        assert all(len(set(prompts[i : i + G])) == 1 for i in range(0, len(prompts), G))
        assert set(prompt_kinds(batch, tokenizer)) == {"varying"}


def never_worth_completing(trainer, monkeypatch) -> None:
    """The screening estimates as after a long run in which completing agreeing prompts never paid; no exploring."""
    monkeypatch.setattr(screening_rounds, "EXPLORE_SHARE", 0.0)
    trainer.dynamic_sampling.screening.completed.estimates["earlier steps"] = RetentionEstimate(0.0, 0.0, 0.0, 1e3)


def completed_prompts_per_step(rounds: list[dict]) -> dict[int, set[str]]:
    """The prompts of each step that came back in a later round of their step (were completed)."""
    completed: dict[int, set[str]] = {}
    for step in {entry["step"] for entry in rounds}:
        seen = set()
        for entry in (entry for entry in rounds if entry["step"] == step):
            prompts = set(entry["prompts"])
            completed.setdefault(step, set()).update(prompts & seen)
            seen |= prompts
    return completed


def test_agreeing_probes_cost_k_completions_and_are_counted(make_model, tokenizer, tmp_path, monkeypatch):
    trainer, reward, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(KINDS, 8), max_steps=3, **SCREEN)
    never_worth_completing(trainer, monkeypatch)
    rounds = record_rounds(trainer)
    trainer.train()
    generated = sum(len(call) for call in reward.calls)  # one reward call per round: every completion scored once
    logs = ds_logs(trainer)
    assert sum(h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] for h in logs) == generated
    for h in logs:
        screened, completed = h[N.DYNAMIC_SAMPLING_SCREENED_PROMPTS], h[N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS]
        dropped = h[N.DYNAMIC_SAMPLING_DROPPED_PROMPTS]
        assert h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] == K * screened + (G - K) * completed
        assert dropped >= 1 and completed == h[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS] <= screened - dropped
        informative = h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] + h[N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS]
        assert h[N.DYNAMIC_SAMPLING_COMPLETIONS_PER_INFORMATIVE_GROUP] == (
            h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] / informative
        )
    # 'right' and 'wrong' probes agree: only 'varying' prompts come back in a later round of their step
    for completed in completed_prompts_per_step(rounds).values():
        assert completed and {prompt[0] for prompt in completed} == {"v"}


def test_agreeing_prompts_are_completed_while_that_is_worth_it(make_model, tokenizer, tmp_path, monkeypatch):
    """With no evidence yet, an agreeing prompt's chance of turning informative at G is the prior's (1/2): completing
    it (1/2 group for G - k = 2 completions) beats screening new prompts (without round latency, the better of 1/2
    group for 2 + 2 / 2 completions and 3/4 group for 4), so the first step spends its budget's reserve on completing
    agreeing prompts. 'right' and 'wrong' prompts never turn informative: the estimate falls, and later steps drop
    them."""
    overrides = dict(SCREEN, dynamic_sampling_fixed_budget=True, dynamic_sampling_round_latency=0.0)
    trainer, reward, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(KINDS, 8), max_steps=6, **overrides)
    monkeypatch.setattr(screening_rounds, "EXPLORE_SHARE", 0.0)
    rounds = record_rounds(trainer)
    trainer.train()
    completed = completed_prompts_per_step(rounds)
    assert {prompt[0] for prompt in completed[0]} - {"v"}  # agreeing ('r' / 'w') prompts completed at first
    assert {prompt[0] for prompt in completed[5]} <= {"v"}  # ... and no more once they proved not worth it
    assert trainer.dynamic_sampling.screening.after_agreement() < 0.5  # the prior's 1/2, before any evidence
    generated = sum(len(call) for call in reward.calls)
    logs = ds_logs(trainer)
    assert sum(h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] for h in logs) == generated
    first = logs[0]  # a completed agreeing prompt is a completed prompt (a zero-variance group), not a dropped one
    assert first[N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS] == first[N.DYNAMIC_SAMPLING_ATTEMPTED_GROUPS]
    assert first[N.DYNAMIC_SAMPLING_ZERO_VARIANCE_GROUPS] >= 1
    assert first[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] == (
        K * first[N.DYNAMIC_SAMPLING_SCREENED_PROMPTS] + (G - K) * first[N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS]
    )
    assert logs[-1][N.DYNAMIC_SAMPLING_DROPPED_PROMPTS] >= 1


def test_a_share_of_agreeing_prompts_is_explored(make_model, tokenizer, tmp_path, monkeypatch):
    """A stratum judged not worth completing is still measured: the explore coin completes its prompts anyway."""
    overrides = dict(SCREEN, dynamic_sampling_fixed_budget=True)
    trainer, _, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(KINDS, 8), max_steps=2, **overrides)
    never_worth_completing(trainer, monkeypatch)
    monkeypatch.setattr(screening_rounds, "EXPLORE_SHARE", 1.0)
    rounds = record_rounds(trainer)
    trainer.train()
    assert any({prompt[0] for prompt in step} - {"v"} for step in completed_prompts_per_step(rounds).values())


def test_a_screening_run_logs_exactly_the_declared_names(make_model, tokenizer, tmp_path):
    trainer, _, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(KINDS, 8), max_steps=2, **SCREEN)
    trainer.train()
    logged = {name for h in ds_logs(trainer) for name in h if name.startswith("dynamic_sampling/")}
    expected = {n for n in expected_names(dynamic_sampling=True, planner=False, screen=True)}
    assert logged == {n for n in expected if n.startswith("dynamic_sampling/")}


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=6, max_size=9), screen=st.sampled_from([None, K]))
def test_the_fixed_budget_is_never_exceeded(make_model, tokenizer, tmp_path_factory, kinds, screen):
    tmp_path = tmp_path_factory.mktemp("budget")
    trainer, reward, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(kinds, 3),
        max_steps=2,
        dynamic_sampling_fixed_budget=True,
        dynamic_sampling_screen_generations=screen,
    )
    rounds = record_rounds(trainer)
    trainer.train()
    budget = trainer.args.per_device_train_batch_size  # what plain GRPO generates per step on this process
    for step in {entry["step"] for entry in rounds}:
        assert sum(len(entry["prompts"]) for entry in rounds if entry["step"] == step) <= budget
    for h in ds_logs(trainer):
        informative = h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS]
        assert informative + h[N.DYNAMIC_SAMPLING_FILLED_GROUPS] == budget // G  # the rest of the batch masked
        if screen is None:  # GRPO's own groups, the zero-variance ones masked, nothing more
            assert h[N.DYNAMIC_SAMPLING_ROUNDS] == 1 and h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] == budget


@pytest.mark.parametrize("screen", [K, None], ids=["screened", "full-groups"])
@pytest.mark.parametrize(
    "overrides", [{"loss_type": name, **settings} for name, settings in LOSS_TYPES.items()], ids=list(LOSS_TYPES)
)
def test_masked_rows_of_a_fixed_budget_leave_every_loss(make_model, tokenizer, tmp_path, overrides, screen):
    """A step that found fewer informative groups than the batch holds trains as TRL would on those alone (the
    'right' prompt's rows are masked, whether it was dropped after its probes or completed to a zero-variance group:
    always so with full groups, and here with screening too, as the prior makes completing it worth it)."""
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["varying", "right"], 12),
        dynamic_sampling_fixed_budget=True,
        dynamic_sampling_screen_generations=screen,
        num_iterations=2,  # TRL keeps the log-probabilities of each round
        **overrides,
    )
    trainer.model.train()
    rows = [dict(trainer.train_dataset[i]) for i in (0, 1) for _ in range(G)]  # index 0 varies, index 1 is right
    batch = trainer._generate_and_score_completions(rows)
    filled = torch.tensor([kind == "right" for kind in prompt_kinds(batch, tokenizer)])
    assert filled.tolist() == [False] * G + [True] * G
    move_off_policy(trainer)
    ours = gradients(trainer.model, trainer.compute_loss(trainer.model, batch))
    reference = gradients(trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, without_rows(batch, filled)))
    assert_same_gradients(ours, reference)


def test_resume_continues_screening_exactly(make_model, tokenizer, tmp_path):
    dataset = kinds_dataset(["right", "varying", "wrong"], repeat=8)
    settings = dict(max_steps=4, save_strategy="steps", save_steps=2, dynamic_sampling_skip_window=1, **SCREEN)
    full, _, _ = build(make_model, tokenizer, tmp_path, dataset, **settings)
    full.train()
    resumed, _, _ = build(make_model, tokenizer, tmp_path, dataset, **settings)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert after_checkpoint(resumed) == after_checkpoint(full) != []
    assert steering_state(resumed) == steering_state(full)
    assert steering_state(full)["screening"]["mixed"]["estimates"]  # the screening estimate is part of the state
    assert parameter_digest(resumed.model) == parameter_digest(full.model)


@pytest.mark.parametrize(
    "settings, says",
    [
        ({"dynamic_sampling_screen_generations": 3}, "divides"),
        ({"dynamic_sampling_screen_generations": 4}, "smaller"),
        ({"dynamic_sampling_screen_generations": 1}, "at least 2"),
        ({"dynamic_sampling_screen_generations": 2, "dynamic_sampling_max_rounds": 1}, "at least 2"),
        ({"dynamic_sampling_fixed_budget": True, "dynamic_sampling_max_groups_per_step": 4}, "Keep one"),
        ({"dynamic_sampling_screen_generations": 2, "dynamic_sampling_oversample": 2.0}, "oversample=None"),
        ({"dynamic_sampling_fixed_budget": True, "dynamic_sampling_confidence": 0.9}, "confidence=None"),
        ({"dynamic_sampling": False, "dynamic_sampling_screen_generations": 2}, "dynamic_sampling=True"),
        ({"dynamic_sampling": False, "dynamic_sampling_fixed_budget": True}, "dynamic_sampling=True"),
    ],
)
def test_configuration_errors_say_what_to_change(tmp_path, settings, says):
    with pytest.raises(ValueError, match=says):
        DAPOConfig(**grpo_kwargs(tmp_path, **{"dynamic_sampling": True, **settings}))


@pytest.mark.parametrize("budget", [False, True], ids=["fill", "fixed-budget"])
def test_screening_trains_a_lora_adapter_over_several_micro_batches(make_model, tokenizer, tmp_path, budget):
    """LoRA, and a generation batch of two micro-batches (gradient_accumulation_steps=2, so steps_per_generation=2):
    whole groups of one prompt, the adapter alone learns, the base model stays as it was."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(make_model(seed=2), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    trainer, _, recorder = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(KINDS, 8),
        model=model,
        max_steps=2,
        learning_rate=1e-2,
        gradient_accumulation_steps=2,
        dynamic_sampling_fixed_budget=budget,
        **SCREEN,
    )
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    lora = {name for name in before if ".lora_" in name}
    trainer.train()
    assert trainer.args.steps_per_generation == 2 and len(recorder.batches) == 2
    for batch in recorder.batches:
        assert batch["completion_ids"].shape[0] == 16  # 2 micro-batches of 8 rows: 4 groups of G = 4
        prompts = tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
        assert all(len(set(prompts[i : i + G])) == 1 for i in range(0, len(prompts), G))
    after = dict(model.named_parameters())
    assert [name for name in sorted(lora) if torch.equal(before[name], after[name])] == []
    assert [name for name in sorted(set(before) - lora) if not torch.equal(before[name], after[name])] == []
    for h in ds_logs(trainer):
        assert (
            h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS]
            == K * h[N.DYNAMIC_SAMPLING_SCREENED_PROMPTS] + (G - K) * h[N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS]
        )


# --- rows of their own -----------------------------------------------------------------------------------------------


def extra_field_rollout(emitted: list[dict]):
    """A TRL ``rollout_func`` that returns per-completion extra fields of several types, as an environment would
    (TRL writes them into each completion's input row, where the reward functions read them); records what it sent."""

    def rollout(prompts, trainer):
        tokenizer = trainer.processing_class
        n = len(prompts)
        fields = {
            "env_score": [float(i % 2) for i in range(n)],
            "env_tag": [f"{prompt}#{i}" for i, prompt in enumerate(prompts)],
            "env_list": [[i, i + 1] for i in range(n)],
            "env_dict": [{"row": i} for i in range(n)],
        }
        emitted.append(fields)
        return {
            "prompt_ids": [tokenizer(prompt)["input_ids"] for prompt in prompts],
            "completion_ids": [[tokenizer.convert_tokens_to_ids("a"), tokenizer.eos_token_id] for _ in prompts],
            "logprobs": None,
            **fields,
        }

    return rollout


class ExtraFieldReward:
    """Scores the rollout's ``env_score``; keeps every field it was handed, per call."""

    __name__ = "env_reward"

    def __init__(self):
        self.seen: list[dict] = []

    def __call__(self, completions, env_score, env_tag, env_list, env_dict, **kwargs):
        self.seen.append(
            {"env_score": list(env_score), "env_tag": list(env_tag), "env_list": env_list, "env_dict": env_dict}
        )
        return list(env_score)


@pytest.mark.parametrize(
    "overrides",
    [{}, SCREEN, {**SCREEN, "dynamic_sampling_fixed_budget": True}, {"dynamic_sampling_fixed_budget": True}],
    ids=["refill", "screening", "screening-fixed-budget", "fixed-budget"],
)
def test_every_completion_keeps_its_own_rollout_fields(make_model, tokenizer, tmp_path, monkeypatch, overrides):
    """Every collector hands TRL one row dict per completion: a rollout's per-completion fields reach their own
    row's reward, never the last row's of the same prompt (shared dicts gave every row the last value)."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func warns that it is experimental
    emitted, reward = [], ExtraFieldReward()
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["varying"], 40),
        reward=reward,
        max_steps=2,
        rollout_func=extra_field_rollout(emitted),
        dynamic_sampling_on_exhausted="fill",
        **overrides,
    )
    trainer.train()
    assert len(reward.seen) == len(emitted) >= 2
    assert reward.seen == emitted
    # every group mixes 0 and 1: each step trains on a full batch of informative groups
    assert all(h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] == 2 for h in ds_logs(trainer))


# --- the funnel --------------------------------------------------------------------------------------------------------


def test_filling_the_batch_completes_only_the_groups_it_misses(make_model, tokenizer, tmp_path):
    """Every 'varying' prompt's probes are mixed: the batch misses 2 groups, so 2 are completed and the other mixed
    prompts cost their probes only (completing them would pay G - k each for surplus groups)."""
    trainer, _, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(["varying"], 40), max_steps=2, **SCREEN)
    trainer.train()
    for h in ds_logs(trainer):
        assert h[N.DYNAMIC_SAMPLING_DISCARDED_SURPLUS_GROUPS] == 0
        assert h[N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS] == h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] == 2
        screened = h[N.DYNAMIC_SAMPLING_SCREENED_PROMPTS]
        assert h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] == K * screened + (G - K) * 2


@pytest.mark.parametrize("budget", [False, True], ids=["fill", "fixed-budget"])
def test_every_screened_prompt_is_completed_or_dropped_and_remembered(make_model, tokenizer, tmp_path, budget):
    """The funnel adds up (screened = completed + dropped, stranded among the dropped) and every screened prompt,
    dropped ones included, is in the prompt history."""
    dataset = kinds_dataset(["varying", "wrong", "varying", "right"], 20)
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        dataset,
        max_steps=4,
        dynamic_sampling_fixed_budget=budget,
        dynamic_sampling_on_exhausted="fill",
        **SCREEN,
    )
    rounds = record_rounds(trainer)
    trainer.train()
    for h in ds_logs(trainer):
        screened, completed = h[N.DYNAMIC_SAMPLING_SCREENED_PROMPTS], h[N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS]
        dropped, stranded = h[N.DYNAMIC_SAMPLING_DROPPED_PROMPTS], h[N.DYNAMIC_SAMPLING_STRANDED_PROBES]
        assert screened == completed + dropped and 0 <= stranded <= dropped
    screened = {prompt for entry in rounds for prompt in entry["prompts"]}
    remembered = {dataset[index]["prompt"] for index in trainer.dynamic_sampling.history.outcomes}
    assert screened <= remembered
