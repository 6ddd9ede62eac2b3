"""Diagnostics for one GRPO/DAPO generation round: plain tensor functions that return ``{metric_name: float}``.

They answer "is this batch still teaching the model anything, and what did it cost?" and are cheap (a few reductions
over ``B * G`` values), so the trainer can call them every step. Metric names are final: the README and
``trl-dapo report`` read them.

Conventions shared with :mod:`trl_dapo_ext.advantages`:

* rewards are one flat tensor of ``B * G`` task rewards, the ``G`` siblings of a prompt next to each other;
* NaN marks an unscorable completion: it is left out of every count, mean and spread;
* a completion is *correct* when its task reward is ``>= success_threshold`` (1.0 suits 0/1 verifiers).

A value that cannot be computed (say, no scorable group) is NaN: TRL's ``GRPOTrainer.log`` averages the logged values
ignoring NaN and writes None when none is left, so a NaN never poisons the averages. Keys that do not apply (no
overlong buffer, no accelerator) are left out instead.

Metric groups (prefix: function):

* ``groups/``: :func:`group_metrics` (contrast split, within-group spread, pass@1 and pass@k)
* ``length/``: :func:`length_metrics` (truncation, overlong buffer and penalty, accuracy before / after shaping), on
  the lengths and truncation flags of :func:`completion_lengths` and :func:`truncated_completions`
* ``cost/``:   :func:`token_metrics`, :func:`generation_cost`, :func:`peak_memory_gb`, :func:`allocated_memory_gb`
* ``time/``:   :class:`StepTimer` and :func:`time_split`

:func:`blank_token_means` keeps TRL's token-mean loss metrics (``entropy``, clip ratios) from logging 0 for a
micro-batch without a single trained token (dynamic sampling's masked fill groups).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager

import torch

from ..metric_names import N
from .advantages import StdKind, nan_std
from .groups import ALL_MAX, ALL_MIN, MIXED, UNSCORABLE, grouped_rewards, success_outcomes

TIME_SECTIONS: tuple[str, ...] = ("generation", "reward", "update")

_NAN = float("nan")


# ---------------------------------------------------------------------------------------------------------- groups/


def pass_at_k(num_samples: torch.Tensor, num_correct: torch.Tensor, k: int) -> torch.Tensor:
    """Unbiased pass@k per group (Chen et al. 2021): ``1 - C(n - c, k) / C(n, k)``, NaN where ``n < k``.

    Uses the numerically stable product ``C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)``: no factorials,
    no overflow, exact 0/1 at the ends.

    Example (4 samples, 1 correct: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1/2):
        >>> pass_at_k(torch.tensor([4, 4]), torch.tensor([1, 1]), k=1)
        tensor([0.2500, 0.2500], dtype=torch.float64)
        >>> pass_at_k(torch.tensor([4, 4, 1]), torch.tensor([1, 0, 1]), k=2)
        tensor([0.5000, 0.0000,    nan], dtype=torch.float64)
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    n = torch.as_tensor(num_samples, dtype=torch.float64)
    c = torch.as_tensor(num_correct, dtype=torch.float64)
    if torch.any(c > n) or torch.any(c < 0):
        raise ValueError("num_correct must lie in [0, num_samples]")
    # pass@k = 1 - C(n-c, k) / C(n, k): the unbiased estimator of Chen et al. 2021 (Codex paper, Sec. 2.1).
    # Factor i runs over n-c+1 .. n; one row per group, padded with factor 1 beyond each group's c terms.
    width = int(c.max().item()) if c.numel() else 0
    offsets = torch.arange(width, dtype=torch.float64)
    i = n.unsqueeze(-1) - offsets  # n, n-1, ..., n-width+1
    used = offsets < c.unsqueeze(-1)
    factors = torch.where(used, 1.0 - k / i.clamp(min=1.0), torch.ones_like(i))
    # A factor (1 - k/i) <= 0 means n - c < k: every k-subset holds a correct sample.
    estimate = 1.0 - factors.clamp(min=0.0).prod(dim=-1)
    return torch.where(n >= k, estimate, torch.full_like(n, _NAN))


def group_metrics(
    rewards: torch.Tensor,
    num_generations: int,
    success_threshold: float = 1.0,
    k: int | None = None,
    std: StdKind = "sample",
    tol: float = 1e-6,
) -> dict[str, float]:
    """``groups/*``: contrast split, within-group reward spread and pass@1 / pass@k of one round's task rewards.

    Args:
        rewards: flat ``(B * G,)`` float tensor of *task* rewards (no length penalty), groups contiguous, NaN =
            unscorable.
        num_generations: group size ``G`` (1 is accepted: every group then lacks contrast).
        success_threshold: a completion is correct when its reward is ``>= success_threshold``.
        k: pass@k's ``k``; defaults to ``G``. A group with fewer than ``k`` scorable samples is left out of pass@k.
        std: divisor of the within-group spread, ``"sample"`` (G-1, TRL's) or ``"population"`` (G).
        tol: spread at or below which a group has no contrast (see :func:`~trl_dapo_ext.core.groups.success_outcomes`).

    Returns ``groups/frac_all_max``, ``groups/frac_all_min``, ``groups/frac_mixed`` (fractions of the groups with at
    least one scorable member; they sum to 1), ``groups/reward_std_mean`` and ``groups/reward_std_p10|p50|p90``
    (std of each such group, 0 for a single scorable member), ``groups/pass@1`` and ``groups/pass@k``.

    Example (G=4: one all-correct, one all-wrong, one 1-of-4 group):
        >>> m = group_metrics(torch.tensor([1.0] * 4 + [0.0] * 4 + [1.0, 0.0, 0.0, 0.0]), 4)
        >>> round(m["groups/frac_mixed"], 4), round(m["groups/pass@1"], 4), round(m["groups/pass@k"], 4)
        (0.3333, 0.4167, 0.6667)
    """
    grouped = grouped_rewards(rewards, num_generations)
    k = num_generations if k is None else k
    if not 1 <= k <= num_generations:
        raise ValueError(f"k must satisfy 1 <= k <= num_generations={num_generations}, got {k}")

    outcome = success_outcomes(rewards, num_generations, success_threshold, tol)
    scorable_groups = outcome != UNSCORABLE
    num_scorable_groups = int(scorable_groups.sum())
    metrics = {
        N.GROUPS_FRAC_ALL_MAX: _fraction(outcome == ALL_MAX, num_scorable_groups),
        N.GROUPS_FRAC_ALL_MIN: _fraction(outcome == ALL_MIN, num_scorable_groups),
        N.GROUPS_FRAC_MIXED: _fraction(outcome == MIXED, num_scorable_groups),
    }

    # Spread of each scorable group; a lone scorable member has no spread (nan_std says NaN for "sample").
    spread = nan_std(grouped.double(), dim=1, kind=std)
    spread = torch.nan_to_num(spread, nan=0.0)[scorable_groups]
    percentiles = (N.GROUPS_REWARD_STD_P10, N.GROUPS_REWARD_STD_P50, N.GROUPS_REWARD_STD_P90)
    if spread.numel():
        quantiles = torch.quantile(spread, torch.tensor([0.1, 0.5, 0.9], dtype=spread.dtype))
        metrics[N.GROUPS_REWARD_STD_MEAN] = spread.mean().item()
        metrics.update(zip(percentiles, quantiles.tolist(), strict=True))
    else:
        metrics.update(dict.fromkeys((N.GROUPS_REWARD_STD_MEAN, *percentiles), _NAN))

    scorable = ~torch.isnan(grouped)
    num_samples = scorable.sum(dim=1)
    num_correct = (scorable & (grouped >= success_threshold)).sum(dim=1)
    metrics[N.GROUPS_PASS_AT_1] = _nanmean(pass_at_k(num_samples, num_correct, 1))
    metrics[N.GROUPS_PASS_AT_K] = _nanmean(pass_at_k(num_samples, num_correct, k))
    return metrics


# ---------------------------------------------------------------------------------------------------------- length/


def completion_lengths(
    completion_ids: Sequence[Sequence[int]], tool_mask: Sequence[Sequence[int]] | None = None
) -> torch.Tensor:
    """Completion lengths as TRL's ``GRPOTrainer._generate`` counts them for ``completions/*_length``.

    Without tools, the generated tokens, EOS included (``len(completion_ids[i])``). With a tool mask (TRL's tools, or
    a ``rollout_func``'s ``env_mask``), the model's own tokens: the 1s of the row's mask, tool output excluded. The
    mask must be the one generation returned: ``mask_truncated_completions`` later zeroes a truncated row's mask for
    the loss, which would count the longest completions as 0 tokens.

    Example (the second completion called a tool that answered with 3 tokens):
        >>> completion_lengths([[5, 6, 2], [5, 9, 9, 9, 6, 2]], tool_mask=[[1, 1, 1], [1, 0, 0, 0, 1, 1]])
        tensor([3, 3])
    """
    if tool_mask is None:
        return torch.tensor([len(ids) for ids in completion_ids], dtype=torch.long)
    if len(tool_mask) != len(completion_ids):
        raise ValueError(f"{len(tool_mask)} tool-mask rows for {len(completion_ids)} completions")
    return torch.tensor([int(sum(mask)) for mask in tool_mask], dtype=torch.long)


def truncated_completions(completion_ids: Sequence[Sequence[int]], stop_ids: Collection[int]) -> torch.Tensor:
    """True where a completion hit the length cap: its last token is no stop token (EOS or pad), as TRL decides
    ``completions/clipped_ratio`` and ``mask_truncated_completions``. An empty completion is not truncated.

    Example (EOS = 2, pad = 0):
        >>> truncated_completions([[5, 2], [5, 6], [5, 0], []], stop_ids={2, 0}).tolist()
        [False, True, False, False]
    """
    stop = set(stop_ids)
    return torch.tensor([bool(ids) and ids[-1] not in stop for ids in completion_ids], dtype=torch.bool)


def length_metrics(
    lengths: torch.Tensor,
    truncated: torch.Tensor,
    task_rewards: torch.Tensor | None = None,
    penalty: torch.Tensor | None = None,
    max_length: int | None = None,
    buffer_length: int | None = None,
    success_threshold: float = 1.0,
) -> dict[str, float]:
    """``length/*``: truncation, the overlong buffer, and the task reward before and after length shaping.

    Args:
        lengths: ``(N,)`` completion lengths in tokens, EOS included, as TRL counts them (:func:`completion_lengths`:
            the model's tokens, tool output excluded).
        truncated: ``(N,)`` bool, True where generation hit the cap before EOS (TRL's ``is_truncated``).
        task_rewards: ``(N,)`` task rewards without the length penalty (NaN = unscorable), or None.
        penalty: ``(N,)`` overlong penalty added to the task reward (values in ``[-factor, 0]``; NaN where no task
            reward scored the completion), or None when shaping is off.
        max_length, buffer_length: ``L_max`` and ``L_cache`` of DAPO Eq. 13; both or neither.
        success_threshold: a completion is correct when its task reward is ``>= success_threshold``.

    Returns ``length/truncated_frac`` always; ``length/in_buffer_frac`` (share with ``L_max - L_cache < L <= L_max``)
    when the buffer is given; ``length/task_accuracy`` (share of scorable completions that are correct, *before*
    shaping) when rewards are given; ``length/overlong_penalty_mean`` with a penalty, and
    ``length/shaped_reward_mean`` (mean over scorable completions of task reward + penalty, *after* shaping) with
    both.

    Example (L_max=20, L_cache=4):
        >>> m = length_metrics(torch.tensor([10, 18, 20]), torch.tensor([False, False, True]),
        ...                    task_rewards=torch.tensor([1.0, 1.0, 0.0]), penalty=torch.tensor([0.0, -0.5, -1.0]),
        ...                    max_length=20, buffer_length=4)
        >>> {name: round(value, 4) for name, value in m.items()}  # doctest: +NORMALIZE_WHITESPACE
        {'length/truncated_frac': 0.3333, 'length/in_buffer_frac': 0.6667, 'length/task_accuracy': 0.6667,
         'length/overlong_penalty_mean': -0.5, 'length/shaped_reward_mean': 0.1667}
    """
    lengths = torch.as_tensor(lengths)
    truncated = torch.as_tensor(truncated, dtype=torch.bool)
    _check_same_length(lengths=lengths, truncated=truncated, task_rewards=task_rewards, penalty=penalty)
    if (max_length is None) != (buffer_length is None):
        raise ValueError("pass both max_length and buffer_length (L_max and L_cache), or neither")

    metrics = {N.LENGTH_TRUNCATED_FRAC: _fraction(truncated, truncated.numel())}
    if max_length is not None:
        in_buffer = (lengths > max_length - buffer_length) & (lengths <= max_length)
        metrics[N.LENGTH_IN_BUFFER_FRAC] = _fraction(in_buffer, lengths.numel())
    if task_rewards is not None:
        scorable = ~torch.isnan(task_rewards)
        metrics[N.LENGTH_TASK_ACCURACY] = _fraction(task_rewards[scorable] >= success_threshold, int(scorable.sum()))
    if penalty is not None:
        metrics[N.LENGTH_OVERLONG_PENALTY_MEAN] = _nanmean(penalty.double())
        if task_rewards is not None:
            # NaN task rewards stay NaN after adding the penalty, so unscorable rows drop out here too.
            metrics[N.LENGTH_SHAPED_REWARD_MEAN] = _nanmean(task_rewards.double() + penalty.double())
    return metrics


# ------------------------------------------------------------------------------------------------------------ cost/


def token_metrics(
    prompt_mask: torch.Tensor, completion_mask: torch.Tensor, loss_mask: torch.Tensor | None = None
) -> dict[str, float]:
    """``cost/useful_token_frac`` and ``cost/padded_token_frac`` of a padded update batch.

    The batch holds ``B`` rows of ``P`` prompt positions (left padded) and ``C`` completion positions (right
    padded). *Useful* positions are those the loss counts; *padded* ones hold no token at all. The rest are real
    prompt tokens and completion tokens the loss ignores (truncated rows under ``mask_truncated_completions``, tool
    output), so ``useful + padded <= 1``.

    Args:
        prompt_mask: ``(B, P)``, 1 on real prompt tokens.
        completion_mask: ``(B, C)``, 1 on real completion tokens (EOS included): the mask *before* TRL zeroes
            truncated rows.
        loss_mask: ``(B, C)``, 1 where the loss counts the token; defaults to ``completion_mask``.

    Example (2 rows, P=3, C=4):
        >>> prompt = torch.tensor([[0, 1, 1], [1, 1, 1]])
        >>> completion = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
        >>> token_metrics(prompt, completion)
        {'cost/useful_token_frac': 0.42857142857142855, 'cost/padded_token_frac': 0.21428571428571427}
    """
    if prompt_mask.dim() != 2 or completion_mask.dim() != 2 or prompt_mask.shape[0] != completion_mask.shape[0]:
        raise ValueError(
            f"prompt_mask (B, P) and completion_mask (B, C) must share B, got {tuple(prompt_mask.shape)} and "
            f"{tuple(completion_mask.shape)}"
        )
    loss_mask = completion_mask if loss_mask is None else loss_mask
    if loss_mask.shape != completion_mask.shape:
        raise ValueError(f"loss_mask must be shaped like completion_mask, got {tuple(loss_mask.shape)}")
    positions = prompt_mask.numel() + completion_mask.numel()
    real = int(prompt_mask.bool().sum()) + int(completion_mask.bool().sum())
    return {
        N.COST_USEFUL_TOKEN_FRAC: _ratio(int((loss_mask.bool() & completion_mask.bool()).sum()), positions),
        N.COST_PADDED_TOKEN_FRAC: _ratio(positions - real, positions),
    }


def generation_cost(generated_tokens: int, retained_groups: int) -> dict[str, float]:
    """``cost/generated_tokens_per_retained_group``: completion tokens generated this step (all rounds, kept or
    discarded) per group that reached the update. NaN when no group was retained.

    Without dynamic sampling every group is retained, so this is ``G`` times the mean completion length; with it,
    the ratio grows as the filter throws groups away.

    Example:
        >>> generation_cost(generated_tokens=3000, retained_groups=4)
        {'cost/generated_tokens_per_retained_group': 750.0}
    """
    if generated_tokens < 0 or retained_groups < 0:
        raise ValueError(f"counts must be >= 0, got {generated_tokens=} and {retained_groups=}")
    return {N.COST_GENERATED_TOKENS_PER_RETAINED_GROUP: _ratio(generated_tokens, retained_groups)}


def peak_memory_gb(device: torch.device | int | None = None) -> float | None:
    """Peak accelerator memory allocated by tensors in this process, in GiB (2**30 bytes); None without CUDA.

    Read-only: the peak counter belongs to the process (``trl-dapo train`` resets it once, before training, and
    reads it again for ``train_summary.json``), so reading it every step gives the run's peak so far. None means
    "skip the metric" (CPU runs log no ``cost/peak_memory_gb``).

    Example:
        >>> value = peak_memory_gb()
        >>> value is None or value >= 0.0
        True
    """
    return _cuda_gib(torch.cuda.max_memory_allocated, device)


def allocated_memory_gb(device: torch.device | int | None = None) -> float | None:
    """Accelerator memory held by tensors right now, in GiB; None without CUDA. Once per step: creeping up is a leak.

    Example:
        >>> value = allocated_memory_gb()
        >>> value is None or value >= 0.0
        True
    """
    return _cuda_gib(torch.cuda.memory_allocated, device)


def _cuda_gib(read: Callable[[torch.device | int | None], int], device: torch.device | int | None) -> float | None:
    """A CUDA memory counter in GiB (2**30 bytes); None without CUDA."""
    return read(device) / 2**30 if torch.cuda.is_available() else None


# ------------------------------------------------------------------------------------------------------------ time/


def time_split(sections: Mapping[str, float], total_s: float) -> dict[str, float]:
    """``time/<name>_s`` and ``time/<name>_frac`` for each named section, plus ``other`` = total minus the sections.

    Example:
        >>> time_split({"generation": 6.0, "reward": 1.0, "update": 2.0}, 10.0)  # doctest: +NORMALIZE_WHITESPACE
        {'time/generation_s': 6.0, 'time/reward_s': 1.0, 'time/update_s': 2.0, 'time/other_s': 1.0,
         'time/generation_frac': 0.6, 'time/reward_frac': 0.1, 'time/update_frac': 0.2, 'time/other_frac': 0.1}
    """
    if "other" in sections:
        raise ValueError("'other' is computed as total minus the named sections; do not time it explicitly")
    seconds = {name: float(value) for name, value in sections.items()}
    # Clock granularity can make the named sections sum a hair above the total; other is never negative.
    seconds["other"] = max(float(total_s) - sum(seconds.values()), 0.0)
    metrics = {f"time/{name}_s": value for name, value in seconds.items()}
    if total_s > 0:
        metrics.update({f"time/{name}_frac": value / total_s for name, value in seconds.items()})
    return metrics


class StepTimer:
    """Accumulates wall time of named sections between two readings; time goes to the *innermost* open section.

    Nesting is allowed and never double counts: time spent in ``reward`` inside ``generation`` is charged to
    ``reward`` only, so the sections plus ``other`` add up to the elapsed total. Cost: two ``perf_counter`` calls per
    section.

    Example:
        >>> timer = StepTimer()
        >>> with timer.section("generation"):
        ...     with timer.section("reward"):
        ...         pass
        >>> sorted(timer.metrics())[:3]
        ['time/generation_frac', 'time/generation_s', 'time/other_frac']
    """

    def __init__(self, sections: tuple[str, ...] = TIME_SECTIONS, clock: Callable[[], float] = time.perf_counter):
        self._names = sections
        self._clock = clock
        self.reset()

    def reset(self) -> None:
        """Zero every section and restart the total."""
        self._seconds = dict.fromkeys(self._names, 0.0)
        self._stack: list[tuple[str, float]] = []  # (section name, when it last resumed)
        self._start = self._clock()

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Charge the time spent inside the block to ``name`` (minus nested sections)."""
        now = self._clock()
        if self._stack:  # pause the enclosing section
            outer, resumed = self._stack[-1]
            self._seconds[outer] = self._seconds.get(outer, 0.0) + now - resumed
        self._stack.append((name, now))
        try:
            yield
        finally:
            now = self._clock()
            _, resumed = self._stack.pop()
            self._seconds[name] = self._seconds.get(name, 0.0) + now - resumed
            if self._stack:  # resume the enclosing section
                self._stack[-1] = (self._stack[-1][0], now)

    def metrics(self, reset: bool = True) -> dict[str, float]:
        """:func:`time_split` of the time since the last reset; then reset (unless ``reset=False``)."""
        if self._stack:
            raise RuntimeError(f"sections still open: {[name for name, _ in self._stack]}")
        result = time_split(self._seconds, self._clock() - self._start)
        if reset:
            self.reset()
        return result


# ------------------------------------------------------------------------------------------ TRL's token-mean metrics

# Metrics TRL's loss logs as a mean over the micro-batch's loss tokens, total / max(count, 1): with no loss token
# (every group filled and masked) that is 0, which reads as "entropy collapsed" on a dashboard.
TOKEN_MEAN_METRICS: tuple[str, ...] = (
    "entropy",
    "kl",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "cispo_clip_ratio",
    "vespo/phi_seq_mean",
)


def blank_token_means(metrics: MutableMapping[str, list[float]], marks: Mapping[str, int]) -> None:
    """Turn the token-mean values appended since ``marks`` (list lengths before the loss) into NaN.

    Call it for a micro-batch whose loss counted no token anywhere. TRL's ``log`` averages ignoring NaN and writes
    None when nothing is left, so such a batch logs no entropy instead of 0.

    Example:
        >>> logged = {"entropy": [1.2, 0.0], "policy_loss": [0.0]}
        >>> blank_token_means(logged, {"entropy": 1})
        >>> logged
        {'entropy': [1.2, nan], 'policy_loss': [0.0]}
    """
    for key in TOKEN_MEAN_METRICS:
        values = metrics.get(key)
        if values is not None:
            values[marks.get(key, 0) :] = [_NAN] * (len(values) - marks.get(key, 0))


# ---------------------------------------------------------------------------------------------------------- helpers


def _fraction(mask: torch.Tensor, count: int) -> float:
    return _ratio(int(mask.sum()), count)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else _NAN


def _nanmean(values: torch.Tensor) -> float:
    return torch.nanmean(values.double()).item() if values.numel() else _NAN


def _check_same_length(**tensors: torch.Tensor | None) -> None:
    sizes = {name: t.numel() for name, t in tensors.items() if t is not None}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"per-completion tensors must have the same length, got {sizes}")
