"""How masked rows (dynamic sampling's fill groups) leave the denominator of each of TRL's loss types.

A masked row has no loss token: its per-token loss is multiplied by 0 everywhere. Whether it still dilutes the
update depends on what the loss type divides by (TRL's ``GRPOTrainer._compute_loss``, 1.15 and 1.16 alike):

* **per sequence** (``grpo``, ``sapo``, ``luspo``, ``dr_grpo``): every row of a micro-batch counts once, loss tokens or
  not: ``grpo``/``sapo`` average the per-sequence token means over the rows (DeepSeekMath Eq. 3's ``1/G``),
  ``luspo`` averages per-sequence sums, ``dr_grpo`` divides the token sum by ``rows * max_completion_length`` (Dr.
  GRPO, Liu et al. 2025: a constant per sequence instead of its length). A masked row adds 0 to the sum
  and 1 to the count, so m masked rows of N shrink the update by ``(N - m) / N``.
* **per loss token of the generation batch** (``dapo``, ``cispo``, ``vespo``): divided by ``num_items_in_batch``
  (DAPO Sec. 3.3, Eq. 12: ``1 / sum |o_i|``), which dynamic sampling recounts without the masked rows.
* **per loss token of the micro-batch** (``bnpo``): masked rows have no loss token, so they never count.

:func:`masked_rows_loss_scale` is the factor that makes a per-sequence loss the loss of the batch without its
masked rows: ``N / (N - m)``, over the whole generation batch (every process), which TRL splits into micro-batches
of equal size and weighs equally. For ``dr_grpo`` this keeps the constant ``max_completion_length`` per sequence and
counts only the sequences that are trained on, as TRL would for the batch without them.
"""

from __future__ import annotations

# What each loss type divides by, as TRL's _compute_loss does (compat.check_loss_types checks the list).
PER_SEQUENCE_LOSSES: tuple[str, ...] = ("grpo", "sapo", "luspo", "dr_grpo")
PER_BATCH_TOKEN_LOSSES: tuple[str, ...] = ("dapo", "cispo", "vespo")
PER_MICRO_BATCH_TOKEN_LOSSES: tuple[str, ...] = ("bnpo",)
LOSS_TYPES: tuple[str, ...] = PER_SEQUENCE_LOSSES + PER_BATCH_TOKEN_LOSSES + PER_MICRO_BATCH_TOKEN_LOSSES


def masked_rows_loss_scale(loss_type: str, rows: int, masked_rows: int) -> float:
    """Factor on the per-sequence loss terms of a generation batch of ``rows`` rows, ``masked_rows`` of them without
    loss tokens, that removes the masked rows from the loss's denominator (1.0 where they are not in it).

    Example (8 rows, 4 of them masked: grpo divides by 8 sequences, the batch without them by 4):
        >>> masked_rows_loss_scale("grpo", rows=8, masked_rows=4), masked_rows_loss_scale("dapo", 8, 4)
        (2.0, 1.0)
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type {loss_type!r} is not one of {LOSS_TYPES}")
    if not 0 <= masked_rows <= rows:
        raise ValueError(f"masked_rows={masked_rows} must be in [0, rows={rows}]")
    if loss_type not in PER_SEQUENCE_LOSSES or masked_rows in (0, rows):  # no row left: the loss is 0 anyway
        return 1.0
    return rows / (rows - masked_rows)
