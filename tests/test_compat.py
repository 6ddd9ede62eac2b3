"""The private TRL seams we depend on exist in the installed TRL release, and a renamed one fails loudly."""

from __future__ import annotations

import pytest
from helpers import digit_fraction_reward, grpo_kwargs
from trl import GRPOTrainer

from trl_dapo_ext import DAPOConfig, DAPOTrainer, compat

pytestmark = pytest.mark.trainer


def test_installed_trl_has_every_pinned_method():
    compat.check_private_methods()
    low, high = compat.TESTED_TRL_RANGE
    assert low <= compat.trl_version() < high


def test_constructed_trainer_has_every_pinned_attribute(make_model, tokenizer, prompt_dataset, tmp_path):
    trainer = DAPOTrainer(
        model=make_model(),
        reward_funcs=digit_fraction_reward,
        args=DAPOConfig(**grpo_kwargs(tmp_path)),
        train_dataset=prompt_dataset,
        processing_class=tokenizer,
    )
    compat.check_private_attributes(trainer)


def test_missing_or_reshaped_method_is_reported():
    with pytest.raises(compat.TRLCompatibilityError, match="_generate_and_score_completions no longer exists"):
        compat.check_private_methods(type("NoSeam", (), {}))

    class Reshaped(GRPOTrainer):
        def _generate(self, prompts, images):
            pass

    with pytest.raises(compat.TRLCompatibilityError, match=r"_generate\(.*differs from the pinned"):
        compat.check_private_methods(Reshaped)


def test_missing_attribute_is_reported():
    with pytest.raises(compat.TRLCompatibilityError, match="_metrics"):
        compat.check_private_attributes(object())
