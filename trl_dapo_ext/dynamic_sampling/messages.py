"""What dynamic sampling tells the user when a step's rounds could not fill the batch: the error raised under
``dynamic_sampling_on_exhausted="error"`` and the warning under ``"fill"``, each with its likely cause."""

from __future__ import annotations

from .counts import GroupCounts, UnscoredRewards

CHECK_REWARD = "trl-dapo check-reward REWARD --dataset DATA"


def no_contrast_cause(totals: GroupCounts, reward_range: list[float]) -> str:
    """With no informative group at all: whether the groups were all wrong or all right, and what usually causes it.

    >>> no_contrast_cause(GroupCounts(attempted=6, all_min=6), [0.0, 1.0])  # doctest: +ELLIPSIS
    'Every group was all wrong (6 of 6): usually a format or verifier mismatch ... '
    >>> no_contrast_cause(GroupCounts(attempted=6, other=6), [0.0, 0.0])  # doctest: +ELLIPSIS
    'Every completion got the same reward, 0: ...'
    """
    low, high = reward_range
    if low == high:  # one value seen: all wrong and all right cannot be told apart by the range, say both
        return (
            f"Every completion got the same reward, {low:g}: if that is a fail, every group was all wrong, usually a "
            "format or verifier mismatch (the completions never give the answer the way the reward reads it); if a "
            f"pass, every group was all right (prompts too easy, or a reward that pays everything). {CHECK_REWARD} "
            "tests the reward on your golds. "
        )
    if totals.all_min == totals.attempted:
        return (
            f"Every group was all wrong ({totals.all_min} of {totals.attempted}): usually a format or verifier mismatch "
            "(the completions never give the answer the way the reward reads it, or the gold column is not what it "
            f"expects); {CHECK_REWARD} tests the reward on your golds. "
        )
    if totals.all_max == totals.attempted:
        return (
            f"Every group was all right ({totals.all_max} of {totals.attempted}): the prompts are too easy, or the "
            f"reward pays everything ({CHECK_REWARD} finds its false positives). "
        )
    return (
        f"Of {totals.attempted} groups, {totals.all_min} were all wrong, {totals.all_max} all right and "
        f"{totals.other} zero-variance otherwise; {CHECK_REWARD} tests the reward. "
    )


def exhausted_message(
    *,
    step: int,
    rounds: int,
    totals: GroupCounts,
    retained_per_process: list[int],
    target: int,
    unscored: UnscoredRewards,
    reward_func_names: list[str],
    reward_range: list[float],
    max_groups_per_step: int | None,
) -> str:
    """The `DynamicSamplingExhausted` message of training step ``step`` (counted from 1)."""
    where = f"dynamic sampling spent its budget of {rounds} generation rounds at step {step}"
    if unscored.scorable == 0:
        return (
            f"{where}: 0 scorable completions, your reward returned NaN/None for all {unscored.rows} "
            f"({unscored.describe(reward_func_names)}), so no group can be informative. A reward returns "
            "None for a completion it cannot score: check that the dataset column it reads holds what it expects "
            "(see the warnings it printed)."
        )
    limits = "dynamic_sampling_max_rounds" + (
        f" or dynamic_sampling_max_groups_per_step={max_groups_per_step} (groups per process per step)"
        if max_groups_per_step is not None
        else ""
    )
    cause = no_contrast_cause(totals, reward_range) if totals.informative == 0 else ""
    return (
        f"{where}: {totals.attempted} prompt groups attempted, {totals.informative} informative, retained per "
        f"process {retained_per_process} of {target} needed{unscored.note(reward_func_names)}. "
        f"{cause}Raise {limits}, use prompts of mixed "
        "difficulty, or set dynamic_sampling_on_exhausted='fill' to train on a partly filled batch."
    )


def fill_warning(
    rounds: int, retained_per_process: list[int], target: int, unscored: UnscoredRewards, reward_func_names: list[str]
) -> str:
    """The warning (once per run) when a batch is completed with uninformative groups."""
    cause = (
        f" Every reward was NaN/None ({unscored.describe(reward_func_names)}): check the reward function "
        "and the dataset column it reads."
        if unscored.scorable == 0
        else ""
    )
    return (
        f"dynamic sampling: after {rounds} rounds only {retained_per_process} of {target} informative "
        "groups per process were found; the batch is completed with uninformative groups masked out of the loss "
        f"(counted in dynamic_sampling/filled_groups).{cause} Warned once per run."
    )
