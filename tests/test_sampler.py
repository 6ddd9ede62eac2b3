"""`DynamicSampler` on its own: the state dynamic sampling keeps across steps and the decision after each round,
tested from counts alone (no model, no TRL trainer, no process group)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_dapo_ext import DAPOConfig
from trl_dapo_ext.core.groups import GroupOutcome
from trl_dapo_ext.dynamic_sampling.counts import GroupCounts
from trl_dapo_ext.dynamic_sampling.planner import RefillPlanner
from trl_dapo_ext.dynamic_sampling.sampler import DynamicSampler, RoundPlan, StepProgress

G = 4


def make_sampler(dataset_size: int = 40, num_processes: int = 1, process_index: int = 0, **fields) -> DynamicSampler:
    args = DAPOConfig("unused", report_to="none", use_cpu=True, dynamic_sampling=True, seed=3, **fields)
    return DynamicSampler(
        args,
        dataset_size=dataset_size,
        num_generations=G,
        filter_indices=[0],
        reward_weights=torch.ones(1),
        num_processes=num_processes,
        process_index=process_index,
    )


def progress(round_index: int, kept: list[int], attempted: int, informative: int, target: int = 2, first: int = 2):
    return StepProgress(round_index, target, first, kept, GroupCounts(attempted=attempted, informative=informative))


def test_a_full_batch_or_the_last_round_stops_the_step():
    sampler = make_sampler(dynamic_sampling_oversample=2.0, dynamic_sampling_max_rounds=3)
    assert sampler.plan_round(progress(1, kept=[2], attempted=4, informative=2)) == RoundPlan(stop="full")
    assert sampler.plan_round(progress(3, kept=[1], attempted=12, informative=1)) == RoundPlan(stop="max_rounds")
    # Short after round 1 of 3: the fixed rule asks for missing / retention groups, capped by the first round's size.
    assert sampler.plan_round(progress(1, kept=[1], attempted=4, informative=1)) == RoundPlan(groups=4)


def test_a_spent_budget_stops_the_step():
    sampler = make_sampler(dynamic_sampling_oversample=2.0, dynamic_sampling_max_groups_per_step=4)
    assert sampler.plan_round(progress(1, kept=[0], attempted=4, informative=0)) == RoundPlan(stop="budget")
    # Two processes: the budget is per process, the attempted count global.
    two = make_sampler(num_processes=2, dynamic_sampling_oversample=2.0, dynamic_sampling_max_groups_per_step=6)
    assert two.plan_round(progress(1, kept=[0, 2], attempted=8, informative=2)) == RoundPlan(groups=2)


def test_the_planner_path_asks_the_planner_with_each_process_shortfall():
    sampler = make_sampler(num_processes=2)
    twin = RefillPlanner(num_processes=2, generations=G)
    sampler.begin_step(step=0)
    assert sampler.first_refill(target=2, own_indices=[-1, -1, -1, -1]) == twin.first_round(2, rounds_left=10)
    plan = sampler.plan_round(progress(1, kept=[2, 0], attempted=8, informative=2))
    assert plan == RoundPlan(groups=twin.next_round([0, 2], rounds_left=9))


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(min_value=2, max_value=12),
    oversample=st.sampled_from([None, 1.0, 2.0, 3.0]),
    retained=st.lists(st.integers(min_value=0, max_value=3), min_size=10, max_size=10),
)
def test_no_step_generates_past_its_budget(budget, oversample, retained):
    """Whatever the rounds retain, a step's groups per process (own + refill) never exceed the budget."""
    target = 2
    sampler = make_sampler(
        dynamic_sampling_oversample=oversample,
        dynamic_sampling_max_groups_per_step=budget,
        dynamic_sampling_max_rounds=10,
    )
    sampler.begin_step(step=0)
    first = sampler.first_refill(target, own_indices=[-1] * target)
    generated, kept, totals, round_groups = 0, 0, GroupCounts(), target + first
    for round_index in range(1, 11):
        generated += round_groups
        found = min(retained[round_index - 1], round_groups)
        kept += found
        totals = GroupCounts(attempted=totals.attempted + round_groups, informative=totals.informative + found)
        if sampler.planner is not None:
            sampler.planner.observe(attempted=round_groups, informative=found)
        plan = sampler.plan_round(StepProgress(round_index, target, first, [kept], totals))
        if plan.stop is not None:
            break
        assert plan.groups >= 1
        round_groups = plan.groups
    assert generated <= max(budget, target)


def test_draws_are_shared_across_processes_and_skip_by_the_history():
    ranks = [make_sampler(dataset_size=12, num_processes=3, process_index=rank) for rank in range(3)]
    for sampler in ranks:
        sampler.begin_step(step=0)
    shares = [sampler.draw(2, round_index=1) for sampler in ranks]
    assert sorted(sum(shares, [])) == sorted(set(sum(shares, [])))  # one global slice, split without overlap
    skipping = make_sampler(dataset_size=12, dynamic_sampling_skip_window=1, dynamic_sampling_skip_floor=0.0)
    skipping.observe_groups(list(range(6)), [int(GroupOutcome.ALL_MAX)] * 6, [G] * 6, [G] * 6)
    skipping.begin_step(step=1)
    drawn = skipping.draw(6, round_index=1)
    assert not set(drawn) & set(range(6)) and skipping.skip_counts.skipped > 0


def test_classify_reads_the_reward_range_seen_so_far():
    sampler = make_sampler()
    rewards = torch.tensor([[1.0], [1.0], [1.0], [1.0], [0.0], [1.0], [0.0], [1.0]])
    assert sampler.classify(rewards).outcomes[0] == GroupOutcome.OTHER  # no range yet: not known to be all right
    sampler.observe_rewards(rewards)
    groups = sampler.classify(rewards)
    assert groups.outcomes == [GroupOutcome.ALL_MAX, GroupOutcome.INFORMATIVE]
    assert groups.informative.tolist() == [False, True] and groups.upper == [4, 2] and groups.scorable == [4, 4]


@pytest.mark.parametrize("oversample", [None, 2.0])
def test_the_state_dict_carries_every_decision(oversample):
    """A sampler restored from another's state draws and plans exactly as the original from there on."""
    fields = dict(
        dynamic_sampling_oversample=oversample, dynamic_sampling_skip_window=1, dynamic_sampling_skip_floor=0.3
    )
    original, restored = make_sampler(dataset_size=16, **fields), make_sampler(dataset_size=16, **fields)

    def step(sampler: DynamicSampler, number: int) -> tuple:
        sampler.begin_step(step=number)
        first = sampler.first_refill(2, own_indices=[number % 16, (number + 7) % 16])
        drawn = sampler.draw(first, round_index=1)
        outcomes = [int(GroupOutcome.ALL_MIN if i % 3 else GroupOutcome.INFORMATIVE) for i in drawn]
        # Later steps see only 1.0: whether it is "all right" depends on the range the earlier steps opened.
        rewards = torch.tensor([[float(i % 2 if number < 10 else 1)] for i in range(4 * G)])
        sampler.observe_rewards(rewards)
        outcomes_seen = sampler.classify(rewards).outcomes
        sampler.observe_round_time(len(drawn) * G, 0.5)
        sampler.observe_groups(drawn, outcomes, [1] * len(drawn), [G] * len(drawn))
        plan = sampler.plan_round(progress(1, kept=[1], attempted=2 + first, informative=1, first=first))
        sampler.end_step()
        return first, drawn, plan, outcomes_seen

    for number in range(10):
        step(original, number)
    restored.load_state_dict(original.state_dict())
    assert restored.state_dict() == original.state_dict()
    assert original.history.skipped > 0  # the history steers the draws being compared
    assert [step(restored, n) for n in range(10, 16)] == [step(original, n) for n in range(10, 16)]
    assert original.reward_range == [0.0, 1.0] and not math.isinf(restored.reward_range[0])


def test_every_attribute_is_saved_configured_or_reset_each_step():
    """A new attribute must be placed in one of these sets: saved in the state dict (it steers later steps), set from
    the config (rebuilt on resume), or reset by begin_step (it lives for one step). Otherwise a resume could silently
    differ from the uninterrupted run."""
    saved = {"stream", "planner", "history", "reward_range", "screening"}
    configured = {"args", "num_generations", "num_processes", "process_index", "filter_indices", "reward_weights"}
    configured |= {"skips_prompts", "warned_fill"}  # warned_fill: a resumed run may warn once more
    per_step = {"step", "skip_counts", "generation_seconds"}
    saved_apart = {"carried"}  # pipelined screening's carried rows: a checkpoint file of their own (state.CARRY_FILE)
    sampler = make_sampler()
    assert set(vars(sampler)) == saved | configured | per_step | saved_apart
    state_keys = {"refill": "stream", "planner": "planner", "history": "history", "reward_range": "reward_range"}
    state_keys["screening"] = "screening"
    assert {state_keys[key] for key in sampler.state_dict()} == saved
