"""DAPOConfig: CLI/YAML exposure of the new fields and clear errors for invalid combinations."""

from __future__ import annotations

import dataclasses

import pytest
import trl
from trl import TrlParser

from trl_dapo_ext import DAPOConfig
from trl_dapo_ext.config import as_dapo_config

pytestmark = pytest.mark.trainer  # depends on TRL's config dataclass: re-run against every supported release

BASE = dict(
    output_dir="out", use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=8, num_generations=4
)
NEW_FIELDS = {f.name for f in dataclasses.fields(DAPOConfig)} - {f.name for f in dataclasses.fields(trl.GRPOConfig)}


def test_every_new_field_has_help_and_a_default_that_is_off():
    assert {"advantage_estimator", "reward_std", "overlong_buffer_length", "overlong_penalty_factor"} <= NEW_FIELDS
    plain, extended = trl.GRPOConfig(**BASE), DAPOConfig(**BASE)
    for field in dataclasses.fields(DAPOConfig):
        if field.name in NEW_FIELDS:
            assert field.metadata.get("help"), f"{field.name} has no help text"
    # The TRL fields keep TRL's defaults and post-init resolution.
    for field in dataclasses.fields(trl.GRPOConfig):
        assert getattr(plain, field.name) == getattr(extended, field.name), field.name


def test_yaml_recipe_with_new_keys_parses(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "output_dir: out\nuse_cpu: true\nbf16: false\nreport_to: none\n"
        "per_device_train_batch_size: 8\nnum_generations: 4\nmax_completion_length: 64\n"
        "advantage_estimator: loo\nreward_std: population\n"
        "overlong_buffer_length: 16\noverlong_penalty_factor: 0.5\n"
    )
    (args,) = TrlParser((DAPOConfig,)).parse_args_and_config(["--config", str(recipe)])
    assert isinstance(args, DAPOConfig)
    assert (args.advantage_estimator, args.reward_std) == ("loo", "population")
    assert (args.overlong_buffer_length, args.overlong_penalty_factor) == (16, 0.5)


def test_cli_flags_override_yaml(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("output_dir: out\nuse_cpu: true\nbf16: false\nadvantage_estimator: loo\n")
    (args,) = TrlParser((DAPOConfig,)).parse_args_and_config(
        ["--config", str(recipe), "--advantage_estimator", "grpo", "--overlong_buffer_length", "100"]
    )
    assert args.advantage_estimator == "grpo" and args.overlong_buffer_length == 100


def test_cli_rejects_unknown_choice():
    with pytest.raises(SystemExit):
        TrlParser((DAPOConfig,)).parse_args_and_config(["--output_dir", "o", "--advantage_estimator", "ppo"])


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"advantage_estimator": "rloo"}, "advantage_estimator='rloo' is not supported: use 'grpo'"),
        ({"reward_std": "unbiased"}, "reward_std='unbiased' is not supported"),
        ({"overlong_buffer_length": 0}, "must be > 0 and < max_completion_length=512"),
        ({"overlong_buffer_length": 512}, "must be > 0 and < max_completion_length=512"),
        ({"overlong_buffer_length": 8, "max_completion_length": 4}, "must be > 0 and < max_completion_length=4"),
        ({"overlong_buffer_length": 8, "max_completion_length": None}, "set max_completion_length"),
        ({"overlong_buffer_length": 8.5}, "must be an int number of tokens"),
        ({"overlong_buffer_length": 8, "overlong_penalty_factor": 0.0}, "overlong_penalty_factor=0.0 must be > 0"),
        (
            {"overlong_buffer_length": 8, "multi_objective_aggregation": "normalize_then_sum"},
            "Set multi_objective_aggregation='sum_then_normalize'",
        ),
        (
            {"advantage_estimator": "loo", "multi_objective_aggregation": "normalize_then_sum"},
            "Set multi_objective_aggregation='sum_then_normalize'",
        ),
    ],
)
def test_invalid_combinations_fail_at_construction(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        DAPOConfig(**{**BASE, **overrides})


def test_plain_grpo_config_upgrades_with_defaults():
    plain = trl.GRPOConfig(**BASE)
    upgraded = as_dapo_config(plain)
    assert isinstance(upgraded, DAPOConfig) and upgraded is not plain
    assert not isinstance(plain, DAPOConfig)
    assert upgraded.advantage_estimator == "grpo" and upgraded.overlong_buffer_length is None
    assert upgraded.to_dict()["advantage_estimator"] == "grpo"
    with pytest.raises(TypeError, match="GRPOConfig or DAPOConfig"):
        as_dapo_config(object())


@dataclasses.dataclass
class ProjectConfig(trl.GRPOConfig):
    """A user's own GRPOConfig subclass, as an unchanged TRL script may define one."""

    project_tag: str = dataclasses.field(default="baseline", metadata={"help": "a field of the user's own"})

    def describe(self) -> str:
        return f"{self.project_tag}: {self.num_generations} generations"


def test_upgraded_config_shares_no_mutable_state():
    plain = trl.GRPOConfig(**BASE, reward_weights=[1.0, 0.5], model_init_kwargs={"dtype": "float32"})
    upgraded = as_dapo_config(plain)
    upgraded.reward_weights.append(2.0)
    upgraded.model_init_kwargs["trust_remote_code"] = True
    upgraded.report_to.append("wandb")
    assert plain.reward_weights == [1.0, 0.5]
    assert plain.model_init_kwargs == {"dtype": "float32"}
    assert "wandb" not in plain.report_to


def test_upgrade_keeps_the_users_own_config_class():
    plain = ProjectConfig(**BASE, project_tag="ablation-3")
    upgraded = as_dapo_config(plain)
    assert isinstance(upgraded, DAPOConfig) and isinstance(upgraded, ProjectConfig)
    assert upgraded.describe() == "ablation-3: 4 generations"
    assert upgraded.to_dict()["project_tag"] == "ablation-3"  # the user's field stays a field
    assert upgraded.to_dict()["advantage_estimator"] == "grpo"
    assert type(as_dapo_config(ProjectConfig(**BASE))) is type(upgraded)  # one upgraded class per user class


def test_upgraded_config_pickles(tmp_path):
    # Trainer.save_model writes training_args.bin with torch.save (pickle)
    import pickle

    for plain in (trl.GRPOConfig(**BASE), ProjectConfig(**BASE, project_tag="x")):
        upgraded = as_dapo_config(plain)
        restored = pickle.loads(pickle.dumps(upgraded))
        assert type(restored) is type(upgraded)
        assert restored.to_dict() == upgraded.to_dict()
