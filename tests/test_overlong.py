"""DAPO Eq. 13: the three regions, their boundaries, and agreement with TRL's own implementation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trl.rewards import get_soft_overlong_punishment

from trl_dapo_ext.core.overlong import OverlongPenalty, overlong_penalty, penalty_only_where_scored


def test_three_regions_and_boundaries():
    # L_max = 100, L_cache = 20: free up to 80, linear to -1 at 100, -1 beyond.
    lengths = [0, 79, 80, 81, 90, 99, 100, 101, 500]
    expected = [0.0, 0.0, 0.0, -0.05, -0.5, -0.95, -1.0, -1.0, -1.0]
    assert overlong_penalty(lengths, 100, 20).tolist() == pytest.approx(expected)


def test_penalty_factor_scales_every_region():
    lengths = [80, 90, 100, 120]
    assert overlong_penalty(lengths, 100, 20, penalty_factor=0.5).tolist() == pytest.approx([0.0, -0.25, -0.5, -0.5])


def test_full_buffer_is_linear_from_zero():
    # L_cache == L_max: the penalty starts at the first token.
    assert overlong_penalty([0, 5, 10], 10, 10).tolist() == pytest.approx([0.0, -0.5, -1.0])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.data())
def test_matches_trl_soft_overlong_punishment(max_length, data):
    buffer_length = data.draw(st.integers(1, max_length))
    lengths = data.draw(st.lists(st.integers(0, 2 * max_length), min_size=1, max_size=20))
    trl_penalty = get_soft_overlong_punishment(max_length, buffer_length)(completion_ids=[[0] * n for n in lengths])
    ours = overlong_penalty(lengths, max_length, buffer_length).tolist()
    assert ours == pytest.approx(trl_penalty, abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.data())
def test_monotone_and_bounded(max_length, data):
    buffer_length = data.draw(st.integers(1, max_length))
    factor = data.draw(st.floats(0.01, 10))
    lengths = torch.arange(0, 2 * max_length + 2)
    penalty = overlong_penalty(lengths, max_length, buffer_length, factor)
    assert torch.all(penalty[1:] <= penalty[:-1] + 1e-7)  # never rewards a longer completion
    assert torch.all((penalty <= 0) & (penalty >= -factor - 1e-6))


def test_the_penalty_is_blanked_only_where_no_task_reward_scored():
    nan = float("nan")
    # Columns: two task rewards, then the penalty. Row 1: one task reward scored; row 2: none did.
    rewards = torch.tensor([[1.0, 0.5, -0.25], [nan, 0.0, -0.5], [nan, nan, -1.0]])
    masked = penalty_only_where_scored(rewards, penalty_column=2, task_columns=[0, 1])
    torch.testing.assert_close(
        masked, torch.tensor([[1.0, 0.5, -0.25], [nan, 0.0, -0.5], [nan, nan, nan]]), equal_nan=True
    )
    assert not torch.isnan(rewards[2, 2])  # the input is left as it was
    # With no task column the penalty is the only reward: nothing to blank.
    torch.testing.assert_close(penalty_only_where_scored(rewards, 2, []), rewards, equal_nan=True)


def test_reward_function_reads_token_lengths():
    penalty = OverlongPenalty(max_length=20, buffer_length=4, penalty_factor=2.0)
    assert penalty.__name__ == "overlong_penalty"
    assert penalty(completions=["a", "b", "c"], completion_ids=[[1] * 16, [1] * 18, [1] * 20]) == [0.0, -1.0, -2.0]


@pytest.mark.parametrize(
    "args,message",
    [
        ((10, 0), "buffer_length must satisfy"),
        ((10, 11), "buffer_length must satisfy"),
        ((0, 0), "max_length must be > 0"),
    ],
)
def test_bad_arguments_raise(args, message):
    with pytest.raises(ValueError, match=message):
        overlong_penalty([1], *args)
    with pytest.raises(ValueError, match=message):
        OverlongPenalty(*args)


def test_negative_factor_raises():
    with pytest.raises(ValueError, match="penalty_factor must be >= 0"):
        overlong_penalty([1], 10, 2, penalty_factor=-1.0)
