"""`core.loss`: the factor that takes masked rows out of each TRL loss type's denominator, by hand."""

from __future__ import annotations

import pytest

from trl_dapo_ext.core.loss import LOSS_TYPES, masked_rows_loss_scale


@pytest.mark.parametrize("loss_type", ["grpo", "sapo", "luspo", "dr_grpo"])
def test_per_sequence_losses_divide_by_the_unmasked_rows(loss_type):
    # 16 rows of which 4 masked: TRL divides by 16 rows, the batch without them by 12.
    assert masked_rows_loss_scale(loss_type, rows=16, masked_rows=4) == 16 / 12
    assert masked_rows_loss_scale(loss_type, rows=16, masked_rows=0) == 1.0
    assert masked_rows_loss_scale(loss_type, rows=16, masked_rows=16) == 1.0  # nothing trained: the loss is 0


@pytest.mark.parametrize("loss_type", ["dapo", "cispo", "vespo", "bnpo"])
def test_token_normalised_losses_need_no_factor(loss_type):
    # Their denominators count loss tokens, and masked rows have none.
    assert masked_rows_loss_scale(loss_type, rows=16, masked_rows=4) == 1.0


def test_every_loss_type_is_classified_once_and_wrong_arguments_are_refused():
    assert sorted(LOSS_TYPES) == sorted(set(LOSS_TYPES)) and len(LOSS_TYPES) == 8
    with pytest.raises(ValueError, match="per_row_sum"):
        masked_rows_loss_scale("per_row_sum", rows=8, masked_rows=0)
    with pytest.raises(ValueError, match="masked_rows=9"):
        masked_rows_loss_scale("grpo", rows=8, masked_rows=9)
