"""Fidelity to the papers and to docs/estimators.md: every worked number and identity, checked through the code a
user runs.

Two kinds of check:

* the trainer's loss on a crafted batch. A `rollout_func` (TRL's public generation hook) returns completions of
  exactly the worked example's lengths; inside the real training step, the micro-batch TRL hands to
  ``compute_loss`` is fed back with crafted advantages and log-probabilities, so TRL's own loss code computes the
  page's numbers;
* the estimators in expectation, by exact enumeration of every group a small softmax policy can sample (no sampling
  noise), with ``docs/scripts/estimators.py``, which also writes the table and plot of ``docs/estimators.md``.

Sources: DAPO (Yu et al. 2025, arXiv 2503.14476: clip-higher Sec. 3.1, dynamic sampling Eq. 11, token-level loss
Eq. 12), DeepSeekMath (Shao et al. 2024, Sec. 4.1: the GRPO advantage; Eq. 4: the k3 KL estimator) and the
derivations of ``docs/estimators.md`` (the (G-1)/G factor, leave-one-out, the standardisation counterexample, the
mixed-group probability, the accepted law).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from helpers import tiny_trainer

from trl_dapo_ext.core.advantages import group_advantages
from trl_dapo_ext.core.groups import informative_groups
from trl_dapo_ext.metric_names import N

ROOT = Path(__file__).resolve().parents[1]
G = 4
SEED_LENGTHS = (8, 32, 40, 20)  # the worked example's retained group: 8 + 32 + 40 + 20 = 100 tokens
FILLER_LENGTH = 30  # completions of the zero-variance prompt, which dynamic sampling must leave out of the count


def _load_estimators_script():
    spec = importlib.util.spec_from_file_location("docs_estimators", ROOT / "docs" / "scripts" / "estimators.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


estimators = _load_estimators_script()


# --------------------------------------------------------------------------------------------------------------------
# The trainer's loss on crafted batches
# --------------------------------------------------------------------------------------------------------------------


def scripted_rollout(prompts, trainer):
    """TRL ``rollout_func``: prompts starting with 'v' get the worked example's lengths, others FILLER_LENGTH (EOS
    included)."""
    tokenizer = trainer.processing_class
    letter, eos = tokenizer.convert_tokens_to_ids("a"), tokenizer.eos_token_id
    prompt_ids = [tokenizer(prompt)["input_ids"] for prompt in prompts]
    lengths = [SEED_LENGTHS[i % G] if p.startswith("v") else FILLER_LENGTH for i, p in enumerate(prompts)]
    completion_ids = [[letter] * (length - 1) + [eos] for length in lengths]
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


def seed_binary_reward(completion_ids, prompts, **kwargs):
    """The worked example's binary group (1, 0, 1, 1) for the 'v' prompt (the 32-token answer fails); 'c' prompts
    always 1."""
    return [0.0 if p.startswith("v") and len(ids) == 32 else 1.0 for p, ids in zip(prompts, completion_ids)]


class LossProbe:
    """Wraps ``trainer.compute_loss``: before each real loss, ``probe(trainer, model, inputs)`` runs on the very
    micro-batch TRL passes (same model state, same accumulation context) and its results are kept."""

    def __init__(self, trainer, probe):
        self.results, self.inputs = [], []
        real = trainer.compute_loss

        def compute_loss(model, inputs, *args, **kwargs):
            self.inputs.append({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()})
            self.results.append(probe(real, model, inputs))
            return real(model, inputs, *args, **kwargs)

        trainer.compute_loss = compute_loss


def build_trainer(make_model, tokenizer, tmp_path, monkeypatch, dataset=None, **overrides):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func warns that it is experimental
    kwargs = dict(
        per_device_train_batch_size=G,
        max_completion_length=max(SEED_LENGTHS),
        max_steps=1,
        learning_rate=0.0,
        loss_type="dapo",
    )
    kwargs.update(overrides)
    model = make_model(seed=3)
    if kwargs.get("beta", 0.0) != 0.0:  # TRL loads the reference model from the policy's path: give it one
        model.save_pretrained(tmp_path / "policy")
        model = str(tmp_path / "policy")
    dataset = dataset or Dataset.from_dict({"prompt": ["v0:"] * 4})
    return tiny_trainer(
        model, seed_binary_reward, dataset, tokenizer, tmp_path, rollout_func=scripted_rollout, **kwargs
    )


def completion_logps(model, inputs) -> torch.Tensor:
    """Per-token log-probabilities of the completion tokens, computed here (not by TRL) to craft ratios."""
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -width - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)


def with_fields(inputs, **fields):
    crafted = dict(inputs)
    crafted.update(fields)
    return crafted


@pytest.mark.trainer
def test_dapo_loss_weighs_every_token_one_hundredth(make_model, tokenizer, tmp_path, monkeypatch):
    # DAPO Eq. 12 (docs/estimators.md#where-the-loss-weights-tokens): lengths 8, 32, 40, 20 -> denominator 100, weight
    # 1/100 per token, whatever the answer's length and whichever micro-batch it lands in. Dynamic sampling drops the
    # zero-variance 'c' groups generated in the same rounds, so num_items_in_batch must be recounted on the retained
    # rows (ours), not the round's (TRL's).
    def token_weights(real, model, inputs):
        # With one update per rollout the ratio is exactly 1, so the loss is -sum_i A_i * L_i * w and
        # d loss / d A_i = -L_i * w: the per-token weight w of each completion, read through TRL's own loss.
        advantages = inputs["advantages"].detach().clone().requires_grad_(True)
        loss = real(model, with_fields(inputs, advantages=advantages))
        (gradient,) = torch.autograd.grad(loss, advantages)
        lengths = inputs["completion_mask"].sum(dim=1)
        return (-gradient / lengths).tolist(), loss.item()

    dataset = Dataset.from_dict({"prompt": ["v0:", "c1:", "c2:", "c3:"]})
    trainer = build_trainer(
        make_model,
        tokenizer,
        tmp_path,
        monkeypatch,
        dataset=dataset,
        dynamic_sampling=True,
        dynamic_sampling_oversample=4.0,
        per_device_train_batch_size=2,  # the group of four is split over two accumulated micro-batches
        gradient_accumulation_steps=2,
    )
    probe = LossProbe(trainer, token_weights)
    trainer.train()

    logs = [h for h in trainer.state.log_history if N.DYNAMIC_SAMPLING_ROUNDS in h]
    assert logs[0][N.DYNAMIC_SAMPLING_ZERO_VARIANCE_GROUPS] >= 1, "no filler group was dropped: the count is untested"
    assert len(probe.inputs) == 2  # two micro-batches of two completions
    lengths = torch.cat([inputs["completion_mask"].sum(dim=1) for inputs in probe.inputs])
    assert sorted(lengths.tolist()) == sorted(SEED_LENGTHS)
    for inputs, (weights, loss) in zip(probe.inputs, probe.results):
        assert inputs["num_items_in_batch"].item() == 100
        assert weights == pytest.approx([1 / 100] * 2, rel=1e-6)
        # And the loss itself is the token-level mean (DAPO Eq. 12) over the whole batch: -sum_i A_i L_i / 100.
        expected = -(inputs["advantages"] * inputs["completion_mask"].sum(dim=1)).sum().item() / 100
        assert loss == pytest.approx(expected, rel=1e-5, abs=1e-7)


@pytest.mark.trainer
def test_clip_higher_bounds_are_1_28_and_0_90(make_model, tokenizer, tmp_path, monkeypatch):
    # DAPO Sec. 3.1 (clip-higher), docs/estimators.md#where-the-loss-weights-tokens: eps_low = 0.10, eps_high = 0.28
    # (TRL: epsilon / epsilon_high). Ratio 1.35 with A = +1 gives min(1.35, 1.28) = 1.28; ratio 0.75 with A = -1 gives
    # min(-0.75, -0.90) = -0.90. Ratios inside the bounds (1.20 > 1 + eps_low, so a symmetric 0.10 would have clipped
    # it; 0.95) pass unchanged.
    cases = [(1.35, +1.0), (0.75, -1.0), (1.20, +1.0), (0.95, -1.0)]  # (ratio, advantage) of completion i

    def clipped_terms(real, model, inputs):
        current = completion_logps(model, inputs)
        ratios = torch.tensor([ratio for ratio, _ in cases]).unsqueeze(1)
        old = current - torch.log(ratios)  # TRL's ratio is exp(logp - old_logp)
        lengths = inputs["completion_mask"].sum(dim=1)
        terms = []
        for i, (_, advantage) in enumerate(cases):
            advantages = torch.zeros(G)
            advantages[i] = advantage
            loss = real(model, with_fields(inputs, advantages=advantages, old_per_token_logps=old))
            # loss = -(1/N) * L_i * C_i with N = 100 loss tokens: recover the per-token clipped surrogate C_i.
            terms.append(-loss.item() * 100 / lengths[i].item())
        high_clipped = trainer._metrics["train"]["clip_ratio/high_mean"][-4:]
        low_clipped = trainer._metrics["train"]["clip_ratio/low_mean"][-4:]
        # Clipped terms carry no gradient: the surrogate stops rewarding moves past the bound.
        advantages = torch.tensor([advantage for _, advantage in cases[:2]] + [0.0, 0.0])
        loss = real(model, with_fields(inputs, advantages=advantages, old_per_token_logps=old))
        gradients = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
        clipped_gradient = sum(g.abs().sum().item() for g in gradients if g is not None)
        return terms, high_clipped, low_clipped, clipped_gradient

    trainer = build_trainer(make_model, tokenizer, tmp_path, monkeypatch, epsilon=0.10, epsilon_high=0.28)
    probe = LossProbe(trainer, clipped_terms)
    trainer.train()

    (terms, high_clipped, low_clipped, clipped_gradient) = probe.results[0]
    assert terms[0] == pytest.approx(1.28, abs=1e-5)
    assert terms[1] == pytest.approx(-0.90, abs=1e-5)
    assert terms[2] == pytest.approx(1.20, abs=1e-4)
    assert terms[3] == pytest.approx(-0.95, abs=1e-4)
    # TRL's logged clip fractions agree: only the first case hits the upper bound, only the second the lower one.
    lengths = probe.inputs[0]["completion_mask"].sum(dim=1).tolist()
    assert high_clipped == pytest.approx([lengths[0] / 100, 0.0, 0.0, 0.0])
    assert low_clipped == pytest.approx([0.0, lengths[1] / 100, 0.0, 0.0])
    assert clipped_gradient == 0.0


@pytest.mark.trainer
def test_k3_kl_is_0_193_where_the_forward_kl_is_0_693(make_model, tokenizer, tmp_path, monkeypatch):
    # k3 estimator (DeepSeekMath Eq. 4; Schulman 2020, "Approximating KL divergence").
    # pi = (1, 0), pi_ref = (0.5, 0.5). The only action pi samples has log pi_ref - log pi = log 0.5,
    # so the estimator gives 0.5 - log 0.5 - 1 = 0.193, while KL(pi || pi_ref) = log 2 = 0.693. The difference, 0.5,
    # is the reference mass on the action pi never samples (the equal-support condition fails).
    beta = 0.04
    pi, pi_ref = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0.5, 0.5], dtype=torch.float64)

    def kl_term(real, model, inputs):
        current = completion_logps(model, inputs)
        u = math.log(pi_ref[0] / pi[0])  # every sampled token is action 0, the only one pi can sample
        crafted = with_fields(inputs, advantages=torch.zeros(G), ref_per_token_logps=current + u)
        loss = real(model, crafted)
        return loss.item() / beta, trainer._metrics["train"]["kl"][-1]

    trainer = build_trainer(make_model, tokenizer, tmp_path, monkeypatch, beta=beta)
    probe = LossProbe(trainer, kl_term)
    trainer.train()

    per_token_kl, logged_kl = probe.results[0]
    exact_forward_kl = torch.sum(torch.special.xlogy(pi, pi) - torch.special.xlogy(pi, pi_ref)).item()
    assert per_token_kl == pytest.approx(0.5 - math.log(0.5) - 1, rel=1e-4)
    assert round(per_token_kl, 3) == 0.193 and round(logged_kl, 3) == 0.193
    assert round(exact_forward_kl, 3) == 0.693
    assert exact_forward_kl - per_token_kl == pytest.approx(pi_ref[pi == 0].sum().item(), rel=1e-4)


# --------------------------------------------------------------------------------------------------------------------
# The estimators in expectation, by exact enumeration of every sampled group
# --------------------------------------------------------------------------------------------------------------------

F64 = torch.float64
# A non-uniform softmax policy over three responses with unequal rewards: no symmetry can hide a wrong factor.
SKEWED = (torch.tensor([0.5, 0.3, 0.2], dtype=F64).log(), torch.tensor([0.0, 1.0, 10.0], dtype=F64))
# The standardisation counterexample (docs/estimators.md#three-identities): uniform policy, rewards (0, 1, 10), G = 2.
UNIFORM = (torch.zeros(3, dtype=F64), torch.tensor([0.0, 1.0, 10.0], dtype=F64))


@pytest.mark.parametrize("num_generations", [2, 3, 4, 5])
def test_group_mean_baseline_scales_the_reward_gradient_by_g_minus_one_over_g(num_generations):
    # docs/estimators.md#three-identities, derived there: E[(1/G) sum_i (R_i - mean R) S_i] = (G - 1) / G * grad V.
    logits, rewards = SKEWED
    estimate = estimators.expected_gradient(logits, rewards, num_generations, "grpo", "none")
    truth = estimators.true_gradient(logits, rewards)
    torch.testing.assert_close(estimate, (num_generations - 1) / num_generations * truth, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("num_generations", [2, 3, 4, 5])
def test_leave_one_out_baseline_is_unbiased(num_generations):
    # Leave-one-out (Kool et al. 2019; Ahmadian et al. 2024): b_-i is independent of Y_i, so E[g] = grad V exactly.
    logits, rewards = SKEWED
    estimate = estimators.expected_gradient(logits, rewards, num_generations, "loo", "none")
    torch.testing.assert_close(estimate, estimators.true_gradient(logits, rewards), rtol=1e-12, atol=1e-12)


def test_true_gradient_of_the_counterexample():
    # grad V = pi * (r - V) with V = 11/3: (-11/9, -8/9, 19/9).
    truth = estimators.true_gradient(*UNIFORM)
    torch.testing.assert_close(truth, torch.tensor([-11 / 9, -8 / 9, 19 / 9], dtype=F64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("std,scale", [("population", 1.0), ("sample", math.sqrt(1 / 2))])
def test_group_standardisation_turns_the_gradient_by_24_79_degrees(std, scale):
    # docs/estimators.md#three-identities: with G = 2 every distinct pair gets advantages (-1, +1) (population std),
    # each unordered pair has probability 2/9 and contributes (e_higher - e_lower) / 2, so E[g] = (-2/9, 0, 2/9): not a
    # multiple of grad V = (-11/9, -8/9, 19/9). Divisor G - 1 (TRL's, reward_std="sample") multiplies the advantages by
    # sqrt((G-1)/G) = 1/sqrt(2): a different scale, the same direction. The angle: acos(60 / sqrt(8 * 546)).
    logits, rewards = UNIFORM
    truth = estimators.true_gradient(logits, rewards)
    estimate = estimators.expected_gradient(logits, rewards, 2, "grpo", "group", std=std, eps=0.0)
    torch.testing.assert_close(estimate, scale * torch.tensor([-2 / 9, 0, 2 / 9], dtype=F64), rtol=1e-12, atol=1e-12)
    _, angle = estimators.relation(estimate, truth)
    assert angle == pytest.approx(math.degrees(math.acos(60 / math.sqrt(8 * 546))), abs=1e-9)
    assert round(angle, 2) == 24.79
    # With the trainer's stabiliser (std + 1e-4) the direction is the same to a hundredth of a degree.
    _, trainer_angle = estimators.relation(
        estimators.expected_gradient(logits, rewards, 2, "grpo", "group", std=std), truth
    )
    assert trainer_angle == pytest.approx(angle, abs=0.01)


@pytest.mark.parametrize("estimator", ["grpo", "loo"])
@pytest.mark.parametrize("num_generations", [2, 3, 4])
def test_binary_rewards_keep_one_prompts_gradient_direction_under_standardisation(estimator, num_generations):
    # With two reward levels every score term points along mu_right - mu_wrong, the direction of grad V, so for one
    # prompt standardising only rescales (by a factor that depends on p): across prompts it reweights them.
    logits, rewards = torch.tensor([0.5, 0.3, 0.2], dtype=F64).log(), torch.tensor([1.0, 0.0, 0.0], dtype=F64)
    for std in ("sample", "population"):
        estimate = estimators.expected_gradient(logits, rewards, num_generations, estimator, "group", std=std)
        factor, angle = estimators.relation(estimate, estimators.true_gradient(logits, rewards))
        assert angle < 1e-5 and factor > 0


@pytest.mark.parametrize("num_generations", [2, 4, 8, 16])
def test_mixed_group_probability_is_one_minus_p_to_the_g_minus_q_to_the_g(num_generations):
    # docs/estimators.md#the-mixed-group-probability: P(0 < C < G) = 1 - p^G - (1 - p)^G, from all 2^G outcomes.
    p = torch.linspace(0, 1, 41, dtype=F64)
    enumerated = estimators.mixed_group_probability(p, num_generations)
    torch.testing.assert_close(enumerated, 1 - p**num_generations - (1 - p) ** num_generations, rtol=0, atol=1e-12)


@pytest.mark.parametrize("num_generations", [2, 4, 8])
def test_filter_keeps_exactly_the_groups_with_nonzero_advantages(num_generations):
    # The dynamic-sampling filter and the estimators' zero-variance branch agree on every binary group.
    outcomes = estimators.binary_outcomes(num_generations)
    kept = informative_groups(outcomes.reshape(-1), num_generations)
    for estimator in ("grpo", "loo"):
        advantages = group_advantages(outcomes.reshape(-1), num_generations, estimator=estimator)
        nonzero = advantages.view(-1, num_generations).abs().sum(dim=1) > 0
        assert torch.equal(nonzero, kept)


def test_dynamic_sampling_accepted_law_is_not_the_prompt_distribution():
    # docs/estimators.md#what-filtering-does-to-the-sampling-law: accepted law rho(x) a(x) / sum rho a with a(x) = 1 -
    # p^G - (1-p)^G; prompts with a = 0 never enter, and inside a retained group the members are neither distributed as
    # p nor independent.
    success, G = (0.0, 0.02, 0.1, 0.5, 0.9, 1.0), 8
    rho = (0.3, 0.2, 0.2, 0.1, 0.1, 0.1)
    law = estimators.accepted_law(success, rho, G)
    p, rho_t = torch.tensor(success, dtype=F64), torch.tensor(rho, dtype=F64)
    acceptance = 1 - p**G - (1 - p) ** G
    torch.testing.assert_close(law["acceptance"], acceptance, rtol=0, atol=1e-12)
    torch.testing.assert_close(law["accepted"], rho_t * acceptance / (rho_t * acceptance).sum(), rtol=0, atol=1e-12)
    assert law["accepted"][0] == 0 and law["accepted"][-1] == 0
    assert 0.5 * (law["accepted"] - rho_t).abs().sum() > 0.3  # total variation from the dataset's law
    inside = slice(1, -1)
    # E[C/G | 0 < C < G] = (p - p^G) / a and P(Y_1, Y_2 right | 0 < C < G) = (p^2 - p^G) / a.
    pi, ai = p[inside], acceptance[inside]
    torch.testing.assert_close(law["accepted_success"][inside], (pi - pi**G) / ai, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(law["pair_success"][inside], (pi**2 - pi**G) / ai, rtol=1e-12, atol=1e-12)
    assert law["accepted_success"][1] > 6 * success[1]  # a 2% prompt is right 13% of the time in retained groups
    assert torch.all((law["pair_success"][inside] - law["accepted_success"][inside] ** 2).abs() > 1e-3)


@pytest.mark.parametrize("estimator,scale", [("grpo", "none"), ("loo", "none"), ("grpo", "group"), ("loo", "group")])
def test_filtering_rescales_each_prompts_update_by_its_acceptance(estimator, scale):
    # Zero-variance groups already contribute nothing, so E[g | kept] = E[g] / a(x): per prompt, dynamic sampling
    # changes the update's size (and with it the mix over prompts, rho -> accepted law), not its direction.
    logits, rewards = SKEWED
    for G in (2, 3):
        unconditional = estimators.expected_gradient(logits, rewards, G, estimator, scale)
        kept = estimators.expected_gradient(logits, rewards, G, estimator, scale, informative_only=True)
        probabilities = logits.exp()
        acceptance = 1 - (probabilities**G).sum()  # a group is kept unless all G draws are the same response
        torch.testing.assert_close(kept * acceptance, unconditional, rtol=1e-10, atol=1e-12)


def brute_force_screening(p: float, G: int, k: int, eps: float = 1e-4) -> tuple[float, float, float]:
    """Screening's selection effect in plain Python, independently of docs/scripts/estimators.py: probe-row and
    other-row mean advantage over the groups whose first k rewards differ, and their update over DAPO's."""
    import itertools
    import statistics

    probe = other = kept_mass = screen_update = dapo_update = 0.0
    for bits in itertools.product((0, 1), repeat=G):
        weight = math.prod(p if b else 1 - p for b in bits)
        mean, std = sum(bits) / G, statistics.stdev(bits)
        advantages = [(b - mean) / (std + eps) for b in bits]
        update = sum(a * (1 / p if b else -1 / (1 - p)) for a, b in zip(advantages, bits)) / G
        if 0 < sum(bits) < G:
            dapo_update += weight * update
        if 0 < sum(bits[:k]) < k:
            kept_mass += weight
            screen_update += weight * update
            probe += weight * sum(advantages[:k]) / k
            other += weight * sum(advantages[k:]) / (G - k)
    return probe / kept_mass, other / kept_mass, screen_update / dapo_update


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_screenings_selection_effect_matches_a_brute_force_enumeration(p):
    found = estimators.screening_selection(p, 8, 4)
    probe, other, ratio = brute_force_screening(p, 8, 4)
    assert found["probe_advantage"] == pytest.approx(probe, abs=1e-9)
    assert found["completion_advantage"] == pytest.approx(other, abs=1e-9)
    assert found["update_ratio"] == pytest.approx(ratio, rel=1e-9)


def test_screening_figures_quoted_on_the_estimators_page():
    """The figures docs/estimators.md states in prose, recomputed."""
    rare = estimators.screening_selection(0.1, 8, 4)
    assert round(rare["probe_advantage"], 2) == 0.25 and round(rare["completion_advantage"], 2) == -0.25
    assert round(rare["update_ratio"], 2) == round(estimators.screening_selection(0.9, 8, 4)["update_ratio"], 2)
    assert round(rare["update_ratio"], 2) == 0.63
    assert round(estimators.screening_selection(0.5, 8, 4)["update_ratio"], 2) == 0.89
    cosines = estimators.screening_graded_cosines()
    assert cosines["dapo"] == pytest.approx(1.0, abs=1e-12) and round(cosines["screening"], 4) == 0.9986
    page = estimators.PAGE_PATH.read_text()
    for quoted in ("+0.25", "-0.25", "0.63 times", "0.89 times", "0.9986"):
        assert quoted in page


def test_estimators_page_tables_are_current():
    # The generated part of docs/estimators.md must be what docs/scripts/estimators.py computes now.
    page = estimators.PAGE_PATH.read_text()
    assert estimators.updated_page(page) == page, "docs/estimators.md is stale: run python docs/scripts/estimators.py"


def test_mixed_group_plot_is_drawn(tmp_path):
    assert estimators.PLOT_PATH.exists(), "docs/estimators_mixed_groups.png is missing: run docs/scripts/estimators.py"
    target = tmp_path / "mixed.png"
    estimators.draw_plot(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
