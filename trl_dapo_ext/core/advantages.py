"""Group-relative advantage estimators (GRPO and REINFORCE leave-one-out), as plain tensor functions.

Rewards arrive as one flat tensor of ``B * G`` values, the ``G`` siblings of each prompt stored next to each other
(TRL's row order). NaN marks an unscorable completion: it is left out of every mean and standard deviation and gets
advantage 0, so one NaN never poisons its group.

For completion ``i`` of a group with rewards ``r_1..r_G`` (scorable members only):

* GRPO (DeepSeekMath Sec. 4.1.2):     ``A_i = (r_i - mean(r)) / (s + eps)``
* Leave-one-out (RLOO, Ahmadian 2024): ``A_i = (r_i - mean_{j != i} r_j) / (s + eps)``
  which equals ``G / (G - 1) * (r_i - mean(r))`` when all ``G`` are scorable.

``s`` is the group's standard deviation (``scale="group"``), the whole batch's (``scale="batch"``), or no division at
all (``scale="none"``). ``std="sample"`` uses Bessel's divisor ``G - 1`` as TRL does; ``std="population"`` uses ``G``
as the derivations in docs/estimators.md do. A group whose scorable rewards are all equal gets advantage 0 (an
explicit zero-variance branch, where DeepSeekMath's formula is 0/0): there is no within-group contrast to learn from.

With the defaults (``grpo``, ``group``, ``sample``, ``eps=1e-4``) the result is bit-identical to the advantages TRL's
``GRPOTrainer`` computes for ``multi_objective_aggregation="sum_then_normalize"``, except on groups whose rewards are
all equal: there TRL can return rounding noise (an ulp of the mean divided by 1e-4) and this function returns 0.
"""

from __future__ import annotations

from typing import Literal

import torch

from .groups import scorable_extremes

Estimator = Literal["grpo", "loo"]
Scale = Literal["group", "batch", "none"]
StdKind = Literal["sample", "population"]

ESTIMATORS: tuple[str, ...] = ("grpo", "loo")
SCALES: tuple[str, ...] = ("group", "batch", "none")
STD_KINDS: tuple[str, ...] = ("sample", "population")


def nan_std(
    values: torch.Tensor, dim: int | None = None, kind: StdKind = "sample", keepdim: bool = False
) -> torch.Tensor:
    """Standard deviation ignoring NaN, with Bessel's (``"sample"``) or the plain (``"population"``) divisor.

    Fewer than two scorable values give NaN for ``"sample"`` (undefined) and 0 for one value with ``"population"``.
    The operation order matches ``trl.trainer.utils.nanstd`` so that ``"sample"`` results agree bit for bit.

    Example:
        >>> nan_std(torch.tensor([0.25, 0.75, 0.75, 0.25]), kind="population")
        tensor(0.2500)
    """
    if dim is None:
        values, dim = values.reshape(-1), 0
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dim, keepdim=True)
    if kind == "sample":
        # In the values' dtype: an integer count would divide to float32 and cost float64 inputs their precision.
        count = torch.sum(~torch.isnan(values), dim=dim, keepdim=True).to(values.dtype)
        correction = count / (count - 1)
        correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
        variance = variance * correction
    elif kind != "population":
        raise ValueError(f"std must be one of {STD_KINDS}, got {kind!r}")
    std = torch.sqrt(variance)
    return std if keepdim else std.squeeze(dim)


def group_advantages(
    rewards: torch.Tensor,
    num_generations: int,
    estimator: Estimator = "grpo",
    scale: Scale = "group",
    std: StdKind = "sample",
    eps: float = 1e-4,
) -> torch.Tensor:
    """Per-completion advantages from contiguous groups of ``num_generations`` rewards.

    Args:
        rewards: flat float tensor of ``B * G`` rewards, groups contiguous; NaN = unscorable.
        num_generations: group size ``G``.
        estimator: ``"grpo"`` (subtract the group mean) or ``"loo"`` (subtract the mean of the *other* scorable
            siblings; a group with a single scorable member gets 0).
        scale: ``"group"``, ``"batch"`` or ``"none"``: which standard deviation divides the centred reward.
        std: ``"sample"`` (divisor n-1, TRL's choice) or ``"population"`` (divisor n).
        eps: added to the standard deviation before dividing (TRL uses 1e-4).

    Returns:
        A tensor shaped like ``rewards``; 0 for unscorable rows and for groups without contrast.

    Example (a four-sample group, population std, no stabiliser):
        >>> group_advantages(torch.tensor([0.25, 0.75, 0.75, 0.25]), 4, std="population", eps=0.0)
        tensor([-1.,  1.,  1., -1.])
        >>> group_advantages(torch.tensor([0.25, 0.75, 0.75, 0.25]), 4, estimator="loo", scale="none")
        tensor([-0.3333,  0.3333,  0.3333, -0.3333])
    """
    _check_arguments(rewards, num_generations, estimator, scale, std, eps)
    grouped = rewards.view(-1, num_generations)
    centred = grouped - _baseline(grouped, estimator)
    advantages = _scaled(centred, grouped, rewards, scale, std, eps)

    # Zero-variance branch, explicit: a group whose scorable rewards are all equal has no contrast. Without it, the
    # rounding error of its mean (an ulp) divided by std + eps (1e-4) would leak noise of order 1e-4 into the update.
    lowest, highest = scorable_extremes(grouped)
    has_contrast = (highest > lowest).unsqueeze(1)
    advantages = torch.where(has_contrast, advantages, torch.zeros_like(advantages))
    return torch.nan_to_num(advantages, nan=0.0).view_as(rewards)


def _baseline(grouped: torch.Tensor, estimator: Estimator) -> torch.Tensor:
    """Each row's baseline, shaped ``[groups, 1]`` (GRPO) or like ``grouped`` (leave-one-out)."""
    # The group mean (GRPO, DeepSeekMath Sec. 4.1.2: mean(r)) or the mean of the other scorable siblings
    # (leave-one-out, Kool et al. 2019; Ahmadian et al. 2024, Sec. 3: b_{-i} = 1/(G-1) sum_{j != i} r_j, so
    # A_i^LOO = r_i - b_{-i}).
    if estimator == "grpo":
        return torch.nanmean(grouped, dim=1, keepdim=True)
    scorable = torch.sum(~torch.isnan(grouped), dim=1, keepdim=True)
    total = torch.nansum(grouped, dim=1, keepdim=True)
    # (S - r_i) / (n - 1); with n == 1 this is 0/0 = NaN and becomes advantage 0 in group_advantages.
    return (total - grouped) / (scorable - 1)


def _scaled(
    centred: torch.Tensor, grouped: torch.Tensor, rewards: torch.Tensor, scale: Scale, std: StdKind, eps: float
) -> torch.Tensor:
    """``centred`` divided by the group's or the batch's spread plus ``eps``, or unscaled."""
    # DeepSeekMath Sec. 4.1.2's std(r), with eps added as TRL does; "group" | "batch" | "none" are TRL's
    # scale_rewards values.
    if scale == "none":
        return centred
    spread = nan_std(grouped, dim=1, kind=std, keepdim=True) if scale == "group" else nan_std(rewards, kind=std)
    denominator = spread + eps
    # NaN (fewer than two scorable) or 0 (eps == 0, no contrast) denominators carry no signal: advantage 0.
    return torch.where(denominator > 0, centred / denominator, torch.zeros_like(centred))


def _check_arguments(
    rewards: torch.Tensor, num_generations: int, estimator: str, scale: str, std: str, eps: float
) -> None:
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if std not in STD_KINDS:
        raise ValueError(f"std must be one of {STD_KINDS}, got {std!r}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations must be a positive int, got {num_generations!r}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be a flat (B*G,) tensor, got shape {tuple(rewards.shape)}")
    if not torch.is_floating_point(rewards):
        raise ValueError(f"rewards must be a float tensor (NaN marks unscorable rows), got {rewards.dtype}")
    if rewards.numel() % num_generations != 0:
        raise ValueError(
            f"{rewards.numel()} rewards do not split into groups of num_generations={num_generations}: "
            "pass whole groups, G siblings of one prompt next to each other"
        )


def combine_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted sum over reward functions, as TRL's ``sum_then_normalize`` computes it.

    A function that returned None (NaN) for a row contributes 0 to that row; a row where *every* function returned
    None is unscorable and stays NaN.

    Example:
        >>> combine_rewards(torch.tensor([[1.0, -0.5], [float("nan"), 0.0], [float("nan")] * 2]), torch.ones(2))
        tensor([0.5000, 0.0000,    nan])
    """
    if rewards_per_func.dim() != 2 or rewards_per_func.shape[1] != weights.numel():
        raise ValueError(
            f"rewards_per_func must be (N, {weights.numel()}) to match the weights, got {tuple(rewards_per_func.shape)}"
        )
    combined = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    combined[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return combined


def normalize_then_sum_advantages(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, num_generations: int, eps: float = 1e-4
) -> torch.Tensor:
    """TRL's ``multi_objective_aggregation="normalize_then_sum"`` (GDPO) advantages, as a pure function.

    Each reward function is normalised within its group, the normalised rewards are summed with ``weights``, and the
    sum is normalised over the whole batch. Dynamic sampling calls it on the retained batch, since the batch-level
    statistics of a generation round no longer apply once groups are dropped.
    """
    num_funcs = weights.numel()
    grouped = rewards_per_func.view(-1, num_generations, num_funcs)
    mean_per_func = torch.nanmean(grouped, dim=1, keepdim=True)
    if num_generations > 1:
        std_per_func = nan_std(grouped, dim=1, keepdim=True)
    else:
        std_per_func = torch.zeros_like(mean_per_func)
    normalised = ((grouped - mean_per_func) / (std_per_func + eps)).view(-1, num_funcs)
    # nansum, then NaN only where every *raw* reward is missing (a lone scorable member normalises to NaN but counts).
    combined = (normalised * weights.to(normalised.device).unsqueeze(0)).nansum(dim=1)
    combined[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    spread = nan_std(combined) if combined.numel() > 1 else torch.zeros(())
    advantages = (combined - torch.nanmean(combined)) / (spread + eps)
    return torch.nan_to_num(advantages, nan=0.0)
