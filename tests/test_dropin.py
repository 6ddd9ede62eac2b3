"""Drop-in fidelity: DAPOTrainer with default fields trains exactly like trl.GRPOTrainer."""

from __future__ import annotations

import pytest
import torch
import trl
from helpers import digit_fraction_reward, grpo_kwargs

import trl_dapo_ext
from trl_dapo_ext import DAPOConfig, DAPOTrainer

pytestmark = pytest.mark.trainer


def _train(trainer_cls, config_cls, make_model, tokenizer, dataset, tmp_path, **overrides):
    args = config_cls(**grpo_kwargs(tmp_path, **overrides))
    trainer = trainer_cls(
        model=make_model(seed=3),
        reward_funcs=digit_fraction_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    losses = [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h]
    return trainer, losses


def test_aliases_are_the_extension_classes():
    assert trl_dapo_ext.GRPOConfig is DAPOConfig
    assert trl_dapo_ext.GRPOTrainer is DAPOTrainer
    assert issubclass(DAPOConfig, trl.GRPOConfig)
    assert issubclass(DAPOTrainer, trl.GRPOTrainer)


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # TRL defaults: loss_type="dapo", scale_rewards="group"
        {"gradient_accumulation_steps": 2, "scale_rewards": "batch", "loss_type": "grpo", "num_iterations": 2},
    ],
    ids=["defaults", "ga2-batch-grpo-mu2"],
)
def test_bit_identical_to_trl(make_model, tokenizer, prompt_dataset, tmp_path, overrides):
    ref_trainer, ref_losses = _train(
        trl.GRPOTrainer, trl.GRPOConfig, make_model, tokenizer, prompt_dataset, tmp_path / "trl", **overrides
    )
    ext_trainer, ext_losses = _train(
        DAPOTrainer, DAPOConfig, make_model, tokenizer, prompt_dataset, tmp_path / "ext", **overrides
    )
    assert len(ref_losses) == 3
    assert ext_losses == ref_losses  # exact float equality, step by step
    ref_state, ext_state = ref_trainer.model.state_dict(), ext_trainer.model.state_dict()
    assert ref_state.keys() == ext_state.keys()
    for name, tensor in ref_state.items():
        assert torch.equal(tensor, ext_state[name]), name
    # The weights moved: identical results are not identical because nothing trained.
    untrained = make_model(seed=3).state_dict()
    assert any(not torch.equal(untrained[name], tensor) for name, tensor in ext_state.items())


def test_plain_trl_config_is_accepted(make_model, tokenizer, prompt_dataset, tmp_path):
    trainer = DAPOTrainer(
        model=make_model(),
        reward_funcs=digit_fraction_reward,
        args=trl.GRPOConfig(**grpo_kwargs(tmp_path, max_steps=1)),
        train_dataset=prompt_dataset,
        processing_class=tokenizer,
    )
    assert isinstance(trainer.args, DAPOConfig)
    assert trainer.args.advantage_estimator == "grpo"
    assert trainer.args.overlong_buffer_length is None
    trainer.train()
