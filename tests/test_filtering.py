"""Pure dynamic-sampling pieces: the informative-group test, the zero-variance split, the refill planner and stream,
row selection across rounds, and the recomputed GDPO advantages."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trl.trainer.utils import RepeatSampler
from trl.trainer.utils import nanstd as trl_nanstd

from trl_dapo_ext.core.advantages import normalize_then_sum_advantages
from trl_dapo_ext.core.groups import fill_priority, informative_groups, zero_variance_split
from trl_dapo_ext.dynamic_sampling.assembly import UnsupportedBatchKey, concat_rows, select_rows
from trl_dapo_ext.dynamic_sampling.planner import plan_refill_groups
from trl_dapo_ext.dynamic_sampling.stream import RefillSampler, local_share

NAN = float("nan")


# --- informative groups -----------------------------------------------------------------------------------------


def test_binary_groups_follow_dapo_eq_11():
    # keep groups with 0 < #correct < G
    rewards = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 0], dtype=torch.float32)
    assert informative_groups(rewards, 4).tolist() == [False, False, True, True]


def test_nan_rows_are_ignored_and_lone_members_are_uninformative():
    rewards = torch.tensor([1.0, NAN, NAN, 0.0, 1.0, NAN, NAN, NAN, NAN, NAN, 0.5, 0.5])
    # group 0: {1, 0} varies; group 1: a single scorable member; group 2: {0.5, 0.5}
    assert informative_groups(rewards, 4).tolist() == [True, False, False]


def test_tolerance_is_on_the_population_std():
    rewards = torch.tensor([0.0, 0.5, 0.0, 0.5])  # population std 0.25 (sample std would be 0.289)
    assert informative_groups(rewards, 4, tolerance=0.249).tolist() == [True]
    assert informative_groups(rewards, 4, tolerance=0.25).tolist() == [False]


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 6), st.data())
def test_informative_means_two_distinct_scorable_values(group_size, data):
    values = data.draw(
        st.lists(st.sampled_from([0.0, 0.25, 1.0, NAN]), min_size=group_size * 3, max_size=group_size * 3)
    )
    got = informative_groups(torch.tensor(values), group_size).tolist()
    for index, flag in enumerate(got):
        scorable = {v for v in values[index * group_size : (index + 1) * group_size] if not math.isnan(v)}
        assert flag == (len(scorable) >= 2)


def test_zero_variance_split_counts_every_uninformative_group_once():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 1.0, 0.0, NAN, 1.0])
    informative = informative_groups(rewards, 2)
    split = zero_variance_split(rewards, 2, informative, lowest=0.0, highest=1.0)
    assert (split.all_max, split.all_min, split.other) == (1, 1, 2)
    # Before the range opens (one value seen), nothing can be called best or worst.
    early = zero_variance_split(rewards[:2], 2, informative[:1], lowest=1.0, highest=1.0)
    assert (early.all_max, early.all_min, early.other) == (0, 0, 1)


def test_fill_priority_prefers_spread_then_scorable_members():
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, NAN, 1.0, 0.0, 0.1, 0.0, 0.0])
    # groups: [1,1] std 0 (2 scorable), [1,1] std 0, [NaN,1] std 0 (1 scorable), [0,0.1] std 0.05, [0,0]
    assert fill_priority(rewards, 2).tolist()[:1] == [3]
    assert fill_priority(rewards, 2).tolist()[-1] == 2


# --- refill planner -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "missing,attempted,informative,max_groups,expected",
    [
        (0, 10, 5, 8, 0),  # nothing missing
        (3, 0, 0, 8, 8),  # nothing seen yet: a full first-size round
        (3, 10, 0, 8, 8),  # no informative group seen: as large as allowed
        (3, 8, 4, 8, 6),  # retention 1/2 -> twice the missing groups
        (1, 10, 9, 8, 2),  # ceil(1 / 0.9)
        (5, 100, 1, 8, 8),  # capped at the first round's size
    ],
)
def test_plan_refill_groups(missing, attempted, informative, max_groups, expected):
    assert plan_refill_groups(missing, attempted, informative, max_groups) == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 50), st.integers(1, 200), st.data(), st.integers(1, 64))
def test_planned_round_covers_the_expected_need(missing, attempted, data, max_groups):
    informative = data.draw(st.integers(1, attempted))
    planned = plan_refill_groups(missing, attempted, informative, max_groups)
    assert 1 <= planned <= max_groups
    if planned < max_groups:  # uncapped: expected informative yield of the round covers what is missing
        assert planned * informative / attempted >= missing - 1e-9


# --- refill stream --------------------------------------------------------------------------------------------------


def test_each_pass_visits_every_index_once_in_a_new_order():
    sampler = RefillSampler(dataset_size=7, seed=3)
    first, second = sampler.take(7), sampler.take(7)
    assert sorted(first) == sorted(second) == list(range(7))
    assert first != second


def test_stream_is_reproducible_and_rank_slices_are_disjoint():
    takes = [local_share(RefillSampler(10, seed=1).take(2 * 3), 2, rank) for rank in range(3)]
    again = [local_share(RefillSampler(10, seed=1).take(2 * 3), 2, rank) for rank in range(3)]
    assert takes == again
    flat = [i for part in takes for i in part]
    assert len(set(flat)) == 6


@pytest.mark.parametrize("seed", [0, 1, 42])
def test_the_refill_stream_does_not_replay_the_dataloader_order(seed):
    """TRL's RepeatSampler seeds its generator with the training seed; a refill stream keyed the same way would hand
    out, as refills, the prompts the dataloader brings next (the history would then never see a refill prompt
    twice, and batches would repeat recent refills)."""
    dataloader_order = list(RepeatSampler(range(50), mini_repeat_count=1, batch_size=50, shuffle=True, seed=seed))
    refill_order = RefillSampler(50, seed=seed).take(50)
    assert sorted(refill_order) == sorted(dataloader_order)
    shared_prefix = next(i for i, (a, b) in enumerate(zip(refill_order, dataloader_order)) if a != b)
    assert shared_prefix < 5


def test_unshuffled_stream_follows_the_dataloader_and_skips_the_steps_prompts():
    stream = RefillSampler(8, seed=0, shuffle=False)
    stream.begin_step([2, 3])  # the dataloader's batch: refills continue after it
    assert stream.take(3) + stream.take(2) == [4, 5, 6, 7, 0]
    stream.begin_step([6, 7])  # the next batch wraps to the dataset's start, never to its own prompts
    assert stream.peek(7) == [0, 1, 2, 3, 4, 5, 6]  # every prompt used: the step starts over (6 is not its own now)
    assert copy.copy(stream).take(3) == [0, 1, 2] and stream.take(3) == [0, 1, 2]  # a preview leaves it as it was
    stream.begin_step([-1, -1])  # rows without a dataset index: the stream continues where it was
    assert stream.take(2) == [3, 4]


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 30), st.data())
def test_unshuffled_refills_are_the_next_unused_prompts_in_dataset_order(size, data):
    """Within a step that needs no more prompts than the dataset holds: no repeat, and each refill is the next
    prompt after the batch's in dataset order (brute force: walk the order and drop the used ones)."""
    batch = data.draw(st.integers(1, size))
    start = data.draw(st.integers(0, size - batch))  # TRL's unshuffled batches never wrap
    own = list(range(start, start + batch))
    counts = data.draw(st.lists(st.integers(0, size), max_size=4).filter(lambda c: sum(c) <= size - batch))
    stream = RefillSampler(size, seed=3, shuffle=False)
    stream.take(data.draw(st.integers(0, size)))  # wherever earlier steps left it
    stream.begin_step(own)
    drawn = [index for count in counts for index in stream.take(count)]
    walk = [(own[-1] + 1 + k) % size for k in range(size)]
    assert drawn == [index for index in walk if index not in own][: len(drawn)]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 20), st.lists(st.integers(0, 15), min_size=1, max_size=8), st.integers(0, 7))
def test_state_round_trip_resumes_the_exact_stream(size, counts, split):
    reference = RefillSampler(size, seed=5)
    expected = [reference.take(c) for c in counts]
    sampler = RefillSampler(size, seed=5)
    before = [sampler.take(c) for c in counts[:split]]
    resumed = RefillSampler(size, seed=5)
    resumed.load_state_dict(sampler.state_dict())
    after = [resumed.take(c) for c in counts[split:]]
    assert before + after == expected


def test_state_from_another_dataset_is_rejected():
    state = RefillSampler(10, seed=0).state_dict()
    with pytest.raises(ValueError, match="dataset_size=10"):
        RefillSampler(11, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="non-empty dataset"):
        RefillSampler(0, seed=0)


# --- rows across rounds ---------------------------------------------------------------------------------------------


def round_output(rows, prompt_width, completion_width, start):
    ids = torch.arange(start, start + rows).unsqueeze(1)
    return {
        "prompt_ids": ids.repeat(1, prompt_width),
        "prompt_mask": torch.ones(rows, prompt_width, dtype=torch.long),
        "completion_ids": ids.repeat(1, completion_width),
        "completion_mask": torch.ones(rows, completion_width, dtype=torch.long),
        "old_per_token_logps": torch.full((rows, completion_width), -1.0),
        "ref_per_token_logps": torch.full((rows, completion_width), -2.0),
        "sampling_per_token_logps": torch.full((rows, completion_width), -1.5),
        "importance_sampling_ratio": torch.full((rows, completion_width), 0.5),
        "advantages": torch.arange(start, start + rows, dtype=torch.float32),
        "num_items_in_batch": torch.tensor(rows * completion_width),
    }


def test_rows_from_rounds_of_different_widths_are_repadded():
    first = select_rows(round_output(4, 3, 5, start=0), torch.tensor([2, 3]))
    second = select_rows(round_output(4, 6, 2, start=10), torch.tensor([0]))
    assert "num_items_in_batch" not in first  # scalars must be recomputed, not concatenated
    merged = concat_rows([first, second], pad_token_id=-7)
    assert merged["prompt_ids"].shape == (3, 6) and merged["completion_ids"].shape == (3, 5)
    assert merged["prompt_ids"][0].tolist() == [-7, -7, -7, 2, 2, 2]  # prompts: left padding
    assert merged["prompt_mask"][0].tolist() == [0, 0, 0, 1, 1, 1]
    assert merged["completion_ids"][2].tolist() == [10, 10, -7, -7, -7]  # completions: right padding
    assert merged["completion_mask"][2].tolist() == [1, 1, 0, 0, 0]
    assert merged["old_per_token_logps"][2].tolist() == [-1.0, -1.0, 0.0, 0.0, 0.0]
    assert merged["ref_per_token_logps"][2].tolist() == [-2.0, -2.0, 0.0, 0.0, 0.0]
    assert merged["sampling_per_token_logps"][2].tolist() == [-1.5, -1.5, 0.0, 0.0, 0.0]  # TRL pads vLLM's with 0
    # TRL's ratio exp((old - sampling) * mask) is 1 at padding; VESPO sums its log over every position
    assert merged["importance_sampling_ratio"][2].tolist() == [0.5, 0.5, 1.0, 1.0, 1.0]
    # every key of the round is re-padded (none left at its round's width)
    assert {key for key, value in merged.items() if value.dim() == 2 and value.shape[1] == 5} == set(first) - {
        "prompt_ids",
        "prompt_mask",
        "advantages",
    }
    assert merged["advantages"].tolist() == [2.0, 3.0, 10.0]


def test_tool_mask_pads_with_one_like_trl():
    batch = round_output(2, 2, 3, start=0)
    batch["tool_mask"] = torch.zeros(2, 3, dtype=torch.long)
    short = round_output(2, 2, 1, start=5)
    short["tool_mask"] = torch.zeros(2, 1, dtype=torch.long)
    merged = concat_rows([select_rows(batch, torch.tensor([0])), select_rows(short, torch.tensor([0]))], 0)
    assert merged["tool_mask"][1].tolist() == [0, 1, 1]


def test_unknown_and_multimodal_keys_are_refused():
    batch = round_output(2, 2, 2, start=0)
    with pytest.raises(UnsupportedBatchKey, match="multimodal"):
        select_rows({**batch, "pixel_values": torch.zeros(2, 3)}, torch.tensor([0]))
    with pytest.raises(UnsupportedBatchKey, match="new_trl_key"):
        select_rows({**batch, "new_trl_key": torch.zeros(2)}, torch.tensor([0]))


# --- GDPO advantages recomputed on a retained batch -----------------------------------------------------------------


def trl_normalize_then_sum(rewards_per_func, weights, group_size):
    """TRL 1.16's normalize_then_sum branch, verbatim arithmetic."""
    grouped = rewards_per_func.view(-1, group_size, len(weights))
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = trl_nanstd(grouped, dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, len(weights))
    rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    std_rewards = trl_nanstd(rewards).expand_as(rewards)
    return torch.nan_to_num((rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4), nan=0.0)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 5), st.integers(1, 4), st.integers(1, 3), st.data())
def test_normalize_then_sum_matches_trl(group_size, num_groups, num_funcs, data):
    values = data.draw(
        st.lists(
            st.sampled_from([0.0, 1.0, 0.5, NAN]) | st.floats(-3, 3),
            min_size=group_size * num_groups * num_funcs,
            max_size=group_size * num_groups * num_funcs,
        )
    )
    rewards_per_func = torch.tensor(values, dtype=torch.float32).view(-1, num_funcs)
    weights = torch.tensor(data.draw(st.lists(st.floats(0.1, 2), min_size=num_funcs, max_size=num_funcs)))
    ours = normalize_then_sum_advantages(rewards_per_func, weights, group_size)
    torch.testing.assert_close(ours, trl_normalize_then_sum(rewards_per_func, weights, group_size), equal_nan=True)
