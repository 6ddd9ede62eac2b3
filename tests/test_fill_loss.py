"""Fill groups (``dynamic_sampling_on_exhausted="fill"``) leave every TRL loss type's denominator.

The reference is TRL's own loss (``GRPOTrainer.compute_loss``) on the same batch with the masked rows removed: the
gradient with the masked rows in the batch must equal the gradient without them, for every loss type TRL offers.
"""

from __future__ import annotations

import pytest
import torch
from test_dynamic_sampling import G, build, kinds_dataset, prompt_kinds
from trl import GRPOTrainer

from trl_dapo_ext import compat
from trl_dapo_ext.dynamic_sampling.assembly import COMPLETION_KEYS, LOSS_SCALE_KEY, concat_rows, select_rows
from trl_dapo_ext.dynamic_sampling.rounds import PROMPT_INDEX_COLUMN

pytestmark = pytest.mark.trainer

# Every loss type of TRL 1.15 and 1.16 (GRPOTrainer._compute_loss), with the settings TRL requires for it.
LOSS_TYPES = {
    "grpo": {},
    "bnpo": {},
    "dr_grpo": {},
    "dapo": {},
    "cispo": {},
    "sapo": {},
    "luspo": {"importance_sampling_level": "sequence"},  # TRL refuses luspo at the token level
    "vespo": {},
}


def test_the_tests_cover_every_loss_type_trl_offers():
    assert compat.trl_loss_types() == set(LOSS_TYPES)


def fill_trainer(make_model, tokenizer, tmp_path, **overrides):
    """A trainer whose one-round budget cannot fill a batch of two groups made of a varying prompt (informative) and
    an always-right prompt: the right group fills the batch, masked."""
    dataset = kinds_dataset(["varying", "right"], repeat=12)
    model = make_model(seed=2)
    if overrides.get("beta", 0.0) != 0.0:  # TRL loads the reference model from the policy's path: give it one
        model.save_pretrained(tmp_path / "policy")
        model = str(tmp_path / "policy")
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        dataset,
        model=model,
        dynamic_sampling_max_rounds=1,
        dynamic_sampling_oversample=1.0,
        dynamic_sampling_on_exhausted="fill",
        num_iterations=2,  # TRL then keeps the generating policy's log-probabilities (old_per_token_logps)
        **overrides,
    )
    trainer.model.train()
    rows = [dict(trainer.train_dataset[i]) for i in (0, 1) for _ in range(G)]  # index 0 varies, index 1 is right
    return trainer, rows


def move_off_policy(trainer, scale: float = 0.1) -> None:
    """Move the model away from the policy that generated (and from the reference model), so that ratios, clipping
    and the KL term all take part in the loss."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in trainer.model.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop, which these tests do not run


def rows_of(batch: dict, keep: torch.Tensor) -> dict:
    """The ``keep`` rows of a batch, every other key as it is."""
    return {key: value[keep] if torch.is_tensor(value) and value.dim() > 0 else value for key, value in batch.items()}


def without_rows(batch: dict, drop: torch.Tensor) -> dict:
    """The batch TRL would have built without the ``drop`` rows (and without the mask that hid them)."""
    return {k: v for k, v in rows_of(batch, ~drop).items() if k != "tool_mask" and not k.startswith("dapo_ext_")}


def gradients(model, loss) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def assert_same_gradients(ours: dict, reference: dict) -> None:
    assert ours.keys() == reference.keys()
    norm = torch.sqrt(sum(g.pow(2).sum() for g in reference.values()))
    assert norm > 1e-4, "no gradient: the comparison would prove nothing"
    for name in reference:
        torch.testing.assert_close(ours[name], reference[name], rtol=1e-4, atol=1e-6 * float(norm), msg=name)


@pytest.mark.parametrize(
    "overrides",
    [{"loss_type": name, **settings} for name, settings in LOSS_TYPES.items()]
    + [{"loss_type": "grpo", "beta": 0.5}, {"loss_type": "dr_grpo", "beta": 0.5}],
    ids=[*LOSS_TYPES, "grpo-kl", "dr_grpo-kl"],
)
def test_masked_fill_rows_leave_the_loss_denominator(make_model, tokenizer, tmp_path, overrides):
    trainer, rows = fill_trainer(make_model, tokenizer, tmp_path, **overrides)
    with pytest.warns(UserWarning, match="masked out of the loss"):
        batch = trainer._generate_and_score_completions(rows)
    move_off_policy(trainer)
    filled = torch.tensor([kind == "right" for kind in prompt_kinds(batch, tokenizer)])
    assert filled.tolist() == [False] * G + [True] * G
    assert torch.all(batch["advantages"][filled] == 0) and batch["advantages"][~filled].abs().min() > 0
    if "beta" in overrides:
        assert "ref_per_token_logps" in batch

    ours = gradients(trainer.model, trainer.compute_loss(trainer.model, batch))
    reference = gradients(trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, without_rows(batch, filled)))
    assert_same_gradients(ours, reference)


def test_masked_rows_leave_the_denominator_across_micro_batches(make_model, tokenizer, tmp_path):
    # One generation batch of 8 rows in two micro-batches of 4 (TRL shuffles the rows, then splits them): each
    # micro-batch's loss is one accumulation step's; their summed gradient is the batch's without the masked rows.
    trainer, rows = fill_trainer(
        make_model, tokenizer, tmp_path, loss_type="grpo", per_device_train_batch_size=4, gradient_accumulation_steps=2
    )
    # TRL's own buffering: micro-step 0 of the cycle generates and hands out micro-batch 0, micro-step 1 the other.
    micro_batches = []
    with pytest.warns(UserWarning, match="masked out of the loss"):
        for step in (0, 1):
            trainer._step = step
            micro_batches.append(trainer._prepare_inputs(rows))
    move_off_policy(trainer)
    trainer.current_gradient_accumulation_steps = 2
    summed = {}
    for micro_batch in micro_batches:
        for name, grad in gradients(trainer.model, trainer.compute_loss(trainer.model, micro_batch)).items():
            summed[name] = summed.get(name, 0) + grad

    whole = {
        key: torch.cat([mb[key] for mb in micro_batches]) for key, value in micro_batches[0].items() if value.dim()
    }
    whole["num_items_in_batch"] = micro_batches[0]["num_items_in_batch"]
    filled = torch.tensor([kind == "right" for kind in prompt_kinds(whole, tokenizer)])
    assert int(filled.sum()) == G
    trainer.current_gradient_accumulation_steps = 1
    reference = gradients(trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, without_rows(whole, filled)))
    assert_same_gradients(summed, reference)


def test_bnpo_still_counts_a_micro_batch_of_only_masked_rows(make_model, tokenizer, tmp_path):
    """The documented limit of bnpo (docs/dynamic-sampling.md): it divides each micro-batch by that micro-batch's loss
    tokens, which never include masked rows, but TRL averages the micro-batches of an accumulation window, and a
    micro-batch made only of masked rows adds a zero to that average."""
    trainer, rows = fill_trainer(make_model, tokenizer, tmp_path, loss_type="bnpo")
    with pytest.warns(UserWarning, match="masked out of the loss"):
        batch = trainer._generate_and_score_completions(rows)
    move_off_policy(trainer)
    filled = torch.tensor([kind == "right" for kind in prompt_kinds(batch, tokenizer)])
    assert LOSS_SCALE_KEY not in batch  # no factor for bnpo: within a micro-batch the masked rows are already out
    trainer.current_gradient_accumulation_steps = 2
    summed = {}
    for micro_batch in (rows_of(batch, ~filled), rows_of(batch, filled)):
        for name, grad in gradients(trainer.model, trainer.compute_loss(trainer.model, micro_batch)).items():
            summed[name] = summed.get(name, 0) + grad
    trainer.current_gradient_accumulation_steps = 1
    alone = gradients(trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, without_rows(batch, filled)))
    assert_same_gradients(summed, {name: grad / 2 for name, grad in alone.items()})


# --- rows of a narrower round, re-padded, with vLLM's importance-sampling ratio ----------------------------------

IS_CLIP = 3.0  # vllm_importance_sampling_clip_max in these tests: some ratios above it, so both modes act


def with_vllm_ratio(batch: dict, mode: str) -> dict:
    """The keys vLLM colocate adds to TRL's batch, computed as TRL 1.16's `_generate_and_score_completions` does:
    ``sampling_per_token_logps`` (padded with 0.0) and ``importance_sampling_ratio`` = exp((old - sampling) * mask),
    summed over the row in the sequence modes, then truncated or masked at the clip."""
    mask = batch["completion_mask"]
    generator = torch.Generator().manual_seed(1)
    sampling = (batch["old_per_token_logps"] + 0.8 * torch.randn(mask.shape, generator=generator)) * mask
    difference = (batch["old_per_token_logps"] - sampling) * mask
    if mode.startswith("sequence"):
        difference = difference.sum(-1, keepdim=True)
    ratio = torch.exp(difference)
    ratio = ratio.clamp(max=IS_CLIP) if mode.endswith("truncate") else ratio.masked_fill(ratio > IS_CLIP, 0.0)
    return {**batch, "sampling_per_token_logps": sampling, "importance_sampling_ratio": ratio}


def reads_the_vllm_ratio(trainer, mode: str) -> None:
    """Make TRL's loss read the ratio as it does after vLLM generation (only `_compute_loss` reads these)."""
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = True
    trainer.vllm_importance_sampling_mode = mode


@pytest.mark.parametrize(
    "loss_type, mode",
    [(name, "token_truncate") for name in LOSS_TYPES]
    + [("vespo", "token_mask"), ("grpo", "sequence_mask"), ("dapo", "sequence_truncate")],
)
def test_rows_of_a_narrower_round_train_as_in_trls_own_batch(make_model, tokenizer, tmp_path, loss_type, mode):
    """Rows kept from a round with shorter completions are re-padded to the batch's width: every key at the padding
    must hold what TRL itself puts there, so that the loss, gradient and VESPO weights are TRL's for the same rows.
    (With 0.0 as the ratio's padding, VESPO summed log(1e-8) per padded column and those rows lost their gradient.)"""
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["varying"], repeat=12),
        loss_type=loss_type,
        num_iterations=2,  # TRL keeps old_per_token_logps, as it always does with vLLM
        **LOSS_TYPES[loss_type],
    )
    trainer.model.train()
    rows = [dict(trainer.train_dataset[i]) for i in (0, 1) for _ in range(G)]
    for row in rows:
        row.pop(PROMPT_INDEX_COLUMN)
    batch = GRPOTrainer._generate_and_score_completions(trainer, rows)  # TRL's own batch of 2 groups
    # Make the first group's completions end early (as if it were a round of short completions): TRL's batch for
    # these rows holds padding from that column on.
    width = batch["completion_ids"].shape[1]
    short = width - 3
    batch["completion_mask"][:G, short:] = 0
    batch["completion_ids"][:G, short:] = tokenizer.pad_token_id
    reference = with_vllm_ratio(batch, mode)  # TRL's batch with these rows: ratio 1 at every padded position

    narrow_round = select_rows(reference, torch.arange(G))
    for key in COMPLETION_KEYS:
        if key in narrow_round and narrow_round[key].shape[1] == width:
            narrow_round[key] = narrow_round[key][:, :short]  # the narrower round's own width
    wide_round = select_rows(reference, torch.arange(G, 2 * G))
    merged = concat_rows([narrow_round, wide_round], pad_token_id=tokenizer.pad_token_id)
    assert merged["completion_ids"].shape[1] == width
    padding = reference["completion_mask"] == 0
    for key in set(merged) & set(COMPLETION_KEYS) - {"old_per_token_logps", "ref_per_token_logps"}:
        # (the log-probabilities at padding are model values that no use of them reads: every use is masked)
        if merged[key].shape[1] == width:  # the sequence modes' ratio is one column: nothing to pad
            assert torch.equal(merged[key][padding], reference[key][padding]), key
    merged = {**merged, "num_items_in_batch": reference["num_items_in_batch"]}

    move_off_policy(trainer)
    reads_the_vllm_ratio(trainer, mode)
    ours = gradients(trainer.model, trainer.compute_loss(trainer.model, merged))
    trl_own = gradients(trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, reference))
    assert_same_gradients(ours, trl_own)
    if loss_type == "vespo":  # the weights themselves: the narrow rows keep TRL's, not ~0
        mask = merged["completion_mask"].float()
        phi = GRPOTrainer.get_gamma_weights(
            merged["advantages"].unsqueeze(1), torch.zeros_like(mask), mask, merged["importance_sampling_ratio"]
        )
        phi_trl = GRPOTrainer.get_gamma_weights(
            reference["advantages"].unsqueeze(1), torch.zeros_like(mask), mask, reference["importance_sampling_ratio"]
        )
        torch.testing.assert_close(phi, phi_trl)


def test_each_generation_batch_of_an_optimizer_step_is_normalised_on_its_own(make_model, tokenizer, tmp_path):
    """steps_per_generation < gradient_accumulation_steps: one optimizer step trains several generation batches.
    The fill factor is each generation batch's own (the later batches are not generated yet when the first one's loss
    is computed), so the step's update is the mean of each batch's update without its masked rows, as TRL weighs the
    generation batches of a step for `dapo` (each by its own token count), not the update of their pooled rows."""
    trainer, rows = fill_trainer(
        make_model, tokenizer, tmp_path, loss_type="grpo", gradient_accumulation_steps=2, steps_per_generation=1
    )
    informative_rows = [dict(trainer.train_dataset[i]) for i in (0, 2) for _ in range(G)]  # both vary: no fill
    with pytest.warns(UserWarning, match="masked out of the loss"):
        with_fill = trainer._generate_and_score_completions(rows)
    without_fill = trainer._generate_and_score_completions(informative_rows)
    assert LOSS_SCALE_KEY in with_fill and LOSS_SCALE_KEY not in without_fill
    move_off_policy(trainer)
    trainer.current_gradient_accumulation_steps = 2
    summed = {}
    for batch in (with_fill, without_fill):
        for name, grad in gradients(trainer.model, trainer.compute_loss(trainer.model, batch)).items():
            summed[name] = summed.get(name, 0) + grad

    filled = torch.tensor([kind == "right" for kind in prompt_kinds(with_fill, tokenizer)])
    trainer.current_gradient_accumulation_steps = 1
    each = [
        gradients(trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, batch))
        for batch in (without_rows(with_fill, filled), without_fill)
    ]
    assert_same_gradients(summed, {name: (each[0][name] + each[1][name]) / 2 for name in each[0]})
    pooled = {
        key: torch.cat([without_rows(with_fill, filled)[key], without_fill[key]])
        for key, value in without_fill.items()
        if value.dim()
    }
    pooled_gradient = gradients(trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, pooled))
    assert any(not torch.allclose(summed[name], pooled_gradient[name], atol=1e-7) for name in summed)


def no_verdict_for_right(completions, kind, **kwargs):
    """A reward with no verdict (None) for the 'right' prompt's completions, as a sandbox that could not run gives."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [None if k == "right" else (sum(map(ord, t)) % 89 + 1) / 91 for k, t in zip(kind, texts)]


@pytest.mark.parametrize("sampling", [False, True], ids=["plain", "fixed-budget"])
@pytest.mark.parametrize(
    "overrides",
    [{"loss_type": name, **settings} for name, settings in LOSS_TYPES.items()],
    ids=list(LOSS_TYPES),
)
def test_unscored_completions_can_be_masked_out_of_the_loss(make_model, tokenizer, tmp_path, overrides, sampling):
    """mask_unscored_completions=True: completions a reward function left unscored leave the loss and its
    denominators, with or without dynamic sampling: the gradient is TRL's on the batch without them. Off, their
    tokens stay in (TRL's behaviour), and the gradient differs."""
    sampling_fields = {"dynamic_sampling_fixed_budget": True} if sampling else {"dynamic_sampling": False}
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["varying", "right"], repeat=12),
        reward=no_verdict_for_right,
        mask_unscored_completions=True,
        num_iterations=2,  # TRL then keeps the generating policy's log-probabilities (old_per_token_logps)
        **sampling_fields,
        **overrides,
    )
    trainer.model.train()
    rows = [dict(trainer.train_dataset[i]) for i in (0, 1) for _ in range(G)]  # index 0 varies, index 1 unscored
    batch = trainer._generate_and_score_completions(rows)
    move_off_policy(trainer)
    unscored = torch.tensor([kind == "right" for kind in prompt_kinds(batch, tokenizer)])
    assert int(unscored.sum()) == G and torch.all(batch["advantages"][unscored] == 0)
    ours = gradients(trainer.model, trainer.compute_loss(trainer.model, batch))
    reference = gradients(
        trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, without_rows(batch, unscored))
    )
    assert_same_gradients(ours, reference)
    if overrides["loss_type"] in ("grpo", "dapo"):  # off: the unscored tokens stay in the denominator
        unmasked = {k: v for k, v in batch.items() if k != "tool_mask" and not k.startswith("dapo_ext_")}
        unmasked["num_items_in_batch"] = (batch["completion_mask"]).sum()
        kept_in = gradients(trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, unmasked))
        with pytest.raises(AssertionError):
            assert_same_gradients(kept_in, reference)
