"""The private TRL seams we depend on exist in the installed TRL release, and a renamed one fails loudly."""

from __future__ import annotations

import pytest
import torch
import trl
from helpers import digit_fraction_reward, tiny_trainer
from trl import GRPOTrainer

from trl_dapo_ext import compat

TRL_CLASSES = {"trainer_class": GRPOTrainer, "config_class": trl.GRPOConfig}  # plain TRL, for comparison

pytestmark = pytest.mark.trainer


def test_installed_trl_has_every_pinned_method():
    compat.check_private_methods()
    low, high = compat.TESTED_TRL_RANGE
    assert low <= compat.trl_version() < high


def test_constructed_trainer_has_every_pinned_attribute(make_model, tokenizer, prompt_dataset, tmp_path):
    trainer = tiny_trainer(make_model(), digit_fraction_reward, prompt_dataset, tokenizer, tmp_path)
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
    with pytest.raises(compat.TRLCompatibilityError, match="_tag_names"):
        compat.check_private_class_attributes(object)


def test_trl_helpers_are_checked(monkeypatch):
    compat.check_trl_helpers()
    monkeypatch.setattr(compat.trl_utils, "is_async_callable", lambda function: False)
    with pytest.raises(compat.TRLCompatibilityError, match="is_async_callable"):
        compat.check_trl_helpers()


# ---------------------------------------------------------------------------------------------------------------
# Every private TRL / transformers name the package touches is listed in compat.py and checked there (issue 15)
# ---------------------------------------------------------------------------------------------------------------


def _private_names_used_by_the_package() -> set[str]:
    """Every ``_name`` the package reads or sets as an attribute, defines as a method or sets in a class body."""
    import ast
    import pathlib

    import trl_dapo_ext

    names = set()
    for path in pathlib.Path(trl_dapo_ext.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.FunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.ClassDef):  # class-level overrides such as `_tag_names = [...]`
                for item in node.body:
                    if isinstance(item, ast.Assign):
                        names.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_every_private_trainer_name_the_package_touches_is_listed(make_model, tokenizer, prompt_dataset, tmp_path):
    trl_trainer = tiny_trainer(make_model(), digit_fraction_reward, prompt_dataset, tokenizer, tmp_path, **TRL_CLASSES)
    trl_private = {name for name in dir(trl_trainer) if name.startswith("_") and not name.startswith("__")}
    touched = _private_names_used_by_the_package() & trl_private
    listed = {*compat.PRIVATE_METHODS, *compat.PRIVATE_ATTRIBUTES, *compat.PRIVATE_CLASS_ATTRIBUTES}
    assert touched - listed == set(), "private TRL names used but not pinned in trl_dapo_ext/compat.py"
    assert "_save_rng_state" in compat.PRIVATE_METHODS and "_tag_names" in compat.PRIVATE_CLASS_ATTRIBUTES


def test_trl_batch_keys_are_all_classified():
    compat.check_batch_keys()

    class NewKey(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            output = {"prompt_ids": 1, "completion_ids": 2}
            output["brand_new_logps"] = 3
            return output

    with pytest.raises(compat.TRLCompatibilityError, match="brand_new_logps"):
        compat.check_batch_keys(NewKey)


def test_trl_still_logs_the_metrics_dynamic_sampling_recomputes():
    compat.check_recomputed_metrics()

    class Renamed(GRPOTrainer):
        def _generate(self, prompts):
            self._metrics["train"]["completions/mean_len"].append(0.0)

        def _generate_and_score_completions(self, inputs):
            self._metrics["train"]["reward"].append(0.0)

    with pytest.raises(compat.TRLCompatibilityError, match="completions/mean_length"):
        compat.check_recomputed_metrics(Renamed)


def test_the_tool_mask_is_found_in_what_generate_returns():
    assert compat.generated_tool_mask_position() == compat.generate_returned_names().index("tool_mask")

    class Reordered(GRPOTrainer):
        def _generate(self, prompts):
            prompt_ids = completion_ids = tool_mask = None
            return tool_mask, prompt_ids, completion_ids

    class Renamed(GRPOTrainer):
        def _generate(self, prompts):
            prompt_ids = completion_ids = model_token_mask = None
            return prompt_ids, completion_ids, model_token_mask

    assert compat.generated_tool_mask_position(Reordered) == 0
    with pytest.raises(compat.TRLCompatibilityError, match="without 'tool_mask'"):
        compat.generated_tool_mask_position(Renamed)


def test_trl_loss_types_are_all_classified():
    compat.check_loss_types()

    class NewLoss(GRPOTrainer):
        def _compute_loss(self, model, inputs):
            if self.loss_type in ["grpo", "sapo"]:
                return 0
            elif self.loss_type == "per_row_sum":
                return 1

    assert compat.trl_loss_types(NewLoss) == {"grpo", "sapo", "per_row_sum"}
    with pytest.raises(compat.TRLCompatibilityError, match="per_row_sum"):
        compat.check_loss_types(NewLoss)
    with pytest.raises(compat.TRLCompatibilityError, match="_compute_loss no longer exists"):
        compat.check_loss_types(type("NoLoss", (), {}))


def test_progress_bar_attribute_is_checked():
    compat.check_progress_bar()

    class Bare:
        def __init__(self):
            pass

    with pytest.raises(compat.TRLCompatibilityError, match="training_bar"):
        compat.check_progress_bar(Bare)


def test_log_buffers_are_checked(make_model, tokenizer, prompt_dataset, tmp_path):
    from collections import defaultdict, deque

    trainer = tiny_trainer(make_model(), digit_fraction_reward, prompt_dataset, tokenizer, tmp_path)
    compat.check_log_buffers(trainer)

    class Reshaped:
        _metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        _logs = {"prompt": deque(), "completion": deque(), "rewards": {}, "advantages": deque()}  # no "extra"

    with pytest.raises(compat.TRLCompatibilityError, match="extra"):
        compat.check_log_buffers(Reshaped())

    class ListMetrics(Reshaped):
        _logs = trainer._logs
        _metrics = {"train": {}, "eval": {}}  # not defaultdict(list): the in-place truncation needs lists

    with pytest.raises(compat.TRLCompatibilityError, match="_metrics"):
        compat.check_log_buffers(ListMetrics())


def test_trl_pads_the_batch_as_batch_py_assumes(make_model, tokenizer, prompt_dataset, tmp_path):
    """Prompt keys are left-padded and completion keys right-padded with the values `batch.py` uses to re-pad."""
    from helpers import add_eos_bias

    from trl_dapo_ext.dynamic_sampling.assembly import COMPLETION_KEYS, PROMPT_KEYS

    model = add_eos_bias(make_model(), tokenizer.eos_token_id, 3.0)  # completions of different lengths
    trainer = tiny_trainer(
        model, digit_fraction_reward, prompt_dataset, tokenizer, tmp_path, max_completion_length=12, **TRL_CLASSES
    )
    trainer.model.train()
    prompts = ["1+1=", "12345+67890="]
    rows = [{"prompt": p} for p in prompts for _ in range(4)]
    batch = trainer._generate_and_score_completions(rows)
    compat.check_batch_keys()
    pad = tokenizer.pad_token_id
    values = {**PROMPT_KEYS, **COMPLETION_KEYS}
    prompt_pad = batch["prompt_mask"] == 0
    assert prompt_pad.any() and not prompt_pad[:, -1].any()  # left padding
    completion_pad = batch["completion_mask"] == 0
    assert completion_pad.any() and not completion_pad[:, 0].any()  # right padding
    for key, mask in (("prompt_ids", prompt_pad), ("completion_ids", completion_pad)):
        expected = pad if values[key] is None else values[key]
        assert torch.all(batch[key][mask] == expected), key
