"""Pipelined screening (``dynamic_sampling_pipeline``): one generation call per step, the next step's probes riding in
this step's call, and the carried probe rows trained one step later against the log-probabilities of the policy
that generated them."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import grpo_kwargs
from test_dynamic_sampling import G, build, ds_logs, kinds_dataset
from test_fill_loss import LOSS_TYPES, assert_same_gradients, gradients, without_rows
from test_resume import after_checkpoint, steering_state
from test_screening import parameter_digest
from trl import GRPOTrainer

from trl_dapo_ext import DAPOConfig
from trl_dapo_ext.dynamic_sampling.state import CARRY_FILE
from trl_dapo_ext.metric_names import N, expected_names

pytestmark = pytest.mark.trainer

K = 2  # probes per prompt (G = 4): a prompt's completion is one more unit of 2 rows
PIPELINE = dict(
    dynamic_sampling_screen_generations=K, dynamic_sampling_fixed_budget=True, dynamic_sampling_pipeline=True
)
KINDS = ["varying", "right", "varying", "wrong"]


def record_calls(trainer) -> list[dict]:
    """Per generation call: the step, the rows' prompts and the generating policy's weights."""
    calls = []
    scored_round = trainer._scored_round

    def recorded(rows, need_rewards=True):
        state = copy.deepcopy(trainer.model.state_dict())
        calls.append(
            {
                "step": trainer.state.global_step,
                "micro_step": trainer._step,
                "prompts": [row["prompt"] for row in rows],
                "policy": state,
            }
        )
        return scored_round(rows, need_rewards)

    trainer._scored_round = recorded
    return calls


def per_step(calls: list[dict]) -> dict[int, list[dict]]:
    steps: dict[int, list[dict]] = {}
    for call in calls:
        steps.setdefault(call["step"], []).append(call)
    return steps


def test_a_step_makes_one_call_that_completes_the_last_calls_probes(make_model, tokenizer, tmp_path):
    trainer, _, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(KINDS, 8), max_steps=6, **PIPELINE)
    calls = record_calls(trainer)
    trainer.train()
    steps = per_step(calls)
    budget = trainer.args.per_device_train_batch_size
    assert [len(steps[step]) for step in sorted(steps)][1:-1] == [1] * 4  # the first and last steps: two calls
    for step_calls in steps.values():
        assert sum(len(call["prompts"]) for call in step_calls) <= budget  # the fixed budget holds
    logs = ds_logs(trainer)
    for step in range(1, 5):
        carried = int(logs[step - 1][N.DYNAMIC_SAMPLING_CARRIED_PROBES])
        (call,) = steps[step]
        # the call opens with the G - k completions of each prompt the previous step's last call probed and carried
        previous_probes = steps[step - 1][-1]["prompts"]
        completed = call["prompts"][: carried * (G - K)][:: G - K]
        assert carried > 0 and set(completed) <= set(previous_probes[::K])
        assert logs[step][N.DYNAMIC_SAMPLING_ROUNDS] == 1
        assert logs[step][N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS] == carried
    assert_pipelined_funnel(logs)
    assert sum(h[N.DYNAMIC_SAMPLING_CARRY_DROPPED_PROBES] for h in logs) == 0


def assert_pipelined_funnel(logs: list[dict]) -> None:
    """Across steps every screened prompt is completed, dropped or carried on, and the last step carries nothing
    (it probes nothing for a step to come)."""
    assert logs[-1][N.DYNAMIC_SAMPLING_CARRIED_PROBES] == 0
    carried_in = 0
    for h in logs:
        screened, completed = h[N.DYNAMIC_SAMPLING_SCREENED_PROMPTS], h[N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS]
        carried_out = h[N.DYNAMIC_SAMPLING_CARRIED_PROBES]
        assert screened == completed - carried_in + h[N.DYNAMIC_SAMPLING_DROPPED_PROMPTS] + carried_out
        carried_in = carried_out


def independent_logps(model, state: dict, batch: dict) -> torch.Tensor:
    """Token log-probabilities of the batch's completions under weights ``state``, by a plain forward pass of
    ``model`` (a fresh one: the trainer's own forwards through the training wrappers)."""
    model.load_state_dict(state)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -width - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


LEVELS = [
    (name, level)
    for name in LOSS_TYPES
    for level in ("token", "sequence")
    if LOSS_TYPES[name].get("importance_sampling_level", level) == level
]


@pytest.mark.parametrize("loss_type, level", LEVELS, ids=[f"{name}-{level}" for name, level in LEVELS])
def test_a_carried_row_is_clipped_against_the_policy_that_generated_it(
    make_model, tokenizer, tmp_path, loss_type, level
):
    trainer, _, recorder = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["varying"], 24),  # every probe mixed: every step trains carried rows
        max_steps=3,
        loss_type=loss_type,
        importance_sampling_level=level,
        learning_rate=0.05,
        # cispo clamps the ratio at epsilon_high, 0.2 by default: every ratio would be clamped, whatever its policy
        epsilon_high=5.0 if loss_type == "cispo" else None,
        **PIPELINE,
    )
    calls = record_calls(trainer)
    trainer.train()
    steps = per_step(calls)
    batch = recorder.batches[1]  # step 1: one call, completing the probes of step 0's second call
    old = batch["old_per_token_logps"]
    probed_by = independent_logps(make_model(), steps[0][-1]["policy"], batch)  # the previous step's policy
    generated_by = independent_logps(make_model(), steps[1][0]["policy"], batch)  # this step's
    mask = batch["completion_mask"]
    stale = ((old - probed_by).abs() * mask).amax(1) < 1e-4  # stored under the previous step's policy
    fresh = torch.isnan(old).all(1)  # on-policy rows: marked, the loss pass's own log-probabilities fill them
    assert bool((stale | fresh).all()) and not bool((stale & fresh).any())
    assert not bool(((old - generated_by).abs() * mask).amax(1)[stale].lt(1e-4).any())  # the policies differ
    share = ds_logs(trainer)[1][N.DYNAMIC_SAMPLING_STALE_ROW_SHARE]
    assert int(stale.sum()) == round(share * len(old)) == len(old) * K // G  # the carried probes' rows

    # The loss under the policy that trains the batch (step 1's): TRL's own loss with the old log-probabilities
    # computed here. The carried rows' ratios are one step's change of policy, the fresh rows' are 1.
    trainer.model.load_state_dict(steps[1][0]["policy"])
    trainer.current_gradient_accumulation_steps = 1
    reference_batch = {**batch, "old_per_token_logps": torch.where(stale[:, None], probed_by, generated_by)}
    filled = batch["tool_mask"].sum(1) == 0 if "tool_mask" in batch else torch.zeros(len(old), dtype=torch.bool)
    ours = gradients(trainer.model, trainer.compute_loss(trainer.model, batch))
    reference = gradients(
        trainer.model, GRPOTrainer.compute_loss(trainer, trainer.model, without_rows(reference_batch, filled))
    )
    assert_same_gradients(ours, reference)


@pytest.mark.parametrize(
    "save_steps, cycle",
    [(2, {}), (3, {"steps_per_generation": 2})],
    ids=["at-a-step", "inside-a-generation-cycle"],
)
def test_resume_completes_the_carried_probes_exactly(make_model, tokenizer, tmp_path, save_steps, cycle):
    dataset = kinds_dataset(KINDS, repeat=8)
    settings = dict(max_steps=7, save_strategy="steps", save_steps=save_steps, **cycle, **PIPELINE)
    full, _, _ = build(make_model, tokenizer, tmp_path, dataset, **settings)
    full.train()
    checkpoint = tmp_path / f"checkpoint-{save_steps}"
    assert (checkpoint / CARRY_FILE).is_file()
    resumed, _, _ = build(make_model, tokenizer, tmp_path, dataset, **settings)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert after_checkpoint(resumed, save_steps) == after_checkpoint(full, save_steps) != []
    # the next cycle completed what the checkpointed one carried
    assert after_checkpoint(full, save_steps)[-2][N.DYNAMIC_SAMPLING_ROUNDS] == 1
    assert steering_state(resumed) == steering_state(full)
    assert parameter_digest(resumed.model) == parameter_digest(full.model)


def test_a_pipelined_run_logs_exactly_the_declared_names(make_model, tokenizer, tmp_path):
    trainer, _, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(KINDS, 8), max_steps=3, **PIPELINE)
    trainer.train()
    logged = {name for h in ds_logs(trainer) for name in h if name.startswith("dynamic_sampling/")}
    expected = expected_names(dynamic_sampling=True, planner=False, screen=True, pipeline=True)
    assert logged == {n for n in expected if n.startswith("dynamic_sampling/")}


@pytest.mark.parametrize(
    "settings, says",
    [
        ({"dynamic_sampling_screen_generations": None}, "set dynamic_sampling_screen_generations"),
        (
            {
                "dynamic_sampling": False,
                "dynamic_sampling_screen_generations": None,
                "dynamic_sampling_fixed_budget": 0,
            },
            "dynamic_sampling_pipeline is a dynamic sampling setting",
        ),
    ],
)
def test_unsupported_settings_are_refused_with_what_to_change(tmp_path, settings, says):
    with pytest.raises(ValueError, match=says):
        DAPOConfig(**grpo_kwargs(tmp_path, **{"dynamic_sampling": True, **PIPELINE, **settings}))


def test_a_run_bounded_by_generation_probes_nothing_past_its_budget(make_model, tokenizer, tmp_path):
    """max_generated_completions: the run stops at the budget, pipelined in the middle, and the step that a plain
    step's completions would take to the budget screens within itself: nothing is left carried."""
    budget = 6 * 8  # six plain steps of 2 prompts x G = 4
    trainer, _, _ = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(KINDS, 8),
        max_steps=20,
        max_generated_completions=budget,
        **PIPELINE,
    )
    calls = record_calls(trainer)
    trainer.train()
    logs = ds_logs(trainer)
    assert trainer.budget_meter.charged() >= budget > trainer.budget_meter.charged() - 8  # stopped at the budget
    assert trainer.state.global_step < 20
    assert logs[-1][N.DYNAMIC_SAMPLING_CARRIED_PROBES] == 0 and trainer.dynamic_sampling.carried is None
    assert any(len(step) == 1 for step in per_step(calls).values())  # pipelined (one call) in the middle


def test_the_completions_table_shows_carried_rows_at_the_step_that_trains_them(make_model, tokenizer, tmp_path):
    trainer, _, recorder = build(
        make_model, tokenizer, tmp_path, kinds_dataset(["varying"], 24), max_steps=2, log_completions=True, **PIPELINE
    )
    trainer.train()
    batch = recorder.batches[-1]  # the last step: the carried groups, completed
    prompts = tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
    completions = tokenizer.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    assert list(trainer._logs["prompt"]) == prompts
    assert list(trainer._logs["completion"]) == completions
    assert ds_logs(trainer)[-1][N.DYNAMIC_SAMPLING_STALE_ROW_SHARE] > 0  # rows from the previous step among them


def test_the_completions_table_switched_on_mid_run_shows_the_carried_rows(make_model, tokenizer, tmp_path):
    """The notebooks' `CompletionsEvery` turns `log_completions` on every N steps: the step that trains probes carried
    from a step without the table shows them too (it raised IndexError)."""
    from trl_dapo_ext.notebook import CompletionsEvery

    trainer, _, recorder = build(
        make_model, tokenizer, tmp_path, kinds_dataset(["varying"], 24), max_steps=2, log_completions=False, **PIPELINE
    )
    trainer.add_callback(CompletionsEvery(trainer, every=2))  # off at step 1, on at step 2
    trainer.train()
    batch = recorder.batches[-1]
    assert trainer.log_completions and ds_logs(trainer)[-1][N.DYNAMIC_SAMPLING_STALE_ROW_SHARE] > 0
    assert list(trainer._logs["prompt"]) == tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
    assert list(trainer._logs["completion"]) == tokenizer.batch_decode(
        batch["completion_ids"], skip_special_tokens=True
    )


def test_pipelined_screening_trains_a_lora_adapter_over_several_micro_batches(make_model, tokenizer, tmp_path):
    """LoRA, and a generation cycle of two micro-batches (gradient_accumulation_steps = steps_per_generation = 2):
    one call per step after the first, the adapter alone learns."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(make_model(seed=2), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    trainer, _, recorder = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(KINDS, 8),
        model=model,
        max_steps=4,
        learning_rate=1e-2,
        gradient_accumulation_steps=2,
        **PIPELINE,
    )
    calls = record_calls(trainer)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    lora = {name for name in before if ".lora_" in name}
    trainer.train()
    assert trainer.args.steps_per_generation == 2 and len(recorder.batches) == 4
    assert [len(step_calls) for step_calls in per_step(calls).values()][1:-1] == [1, 1]
    for batch in recorder.batches:
        prompts = tokenizer.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
        assert all(len(set(prompts[i : i + G])) == 1 for i in range(0, len(prompts), G))
        if "old_per_token_logps" in batch:  # the first step's batch trains no carried row: all on-policy
            assert batch["old_per_token_logps"].shape == batch["completion_ids"].shape
    after = dict(model.named_parameters())
    assert [name for name in sorted(lora) if torch.equal(before[name], after[name])] == []
    assert [name for name in sorted(set(before) - lora) if not torch.equal(before[name], after[name])] == []


@pytest.mark.parametrize(
    "cycle",
    [{"steps_per_generation": 2}, {"num_iterations": 2}],
    ids=["two-steps-per-generation", "two-iterations"],
)
def test_the_carry_crosses_generation_cycles(make_model, tokenizer, tmp_path, cycle):
    """A generation cycle (TRL's batch, every steps_per_generation * num_iterations micro-batches) is the unit: one
    call per cycle in steady state, a carried row's old log-probabilities are those of the policy of the previous
    cycle's call (TRL's own, computed at generation, for the others), and the last cycle probes nothing."""
    trainer, _, recorder = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(["varying"], 48),  # every probe mixed: every cycle trains carried rows
        max_steps=8,
        learning_rate=0.05,
        **cycle,
        **PIPELINE,
    )
    calls = record_calls(trainer)
    trainer.train()
    micro_steps = trainer.args.steps_per_generation * trainer.args.num_iterations
    cycles: dict[int, list[dict]] = {}
    for call in calls:  # a cycle's calls are made at its first micro-step
        cycles.setdefault(call["micro_step"] // micro_steps, []).append(call)
    assert sorted(cycles) == [0, 1, 2, 3] and len(recorder.batches) == 4
    assert [len(cycles[c]) for c in (1, 2)] == [1, 1]
    rows_per_cycle = trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
    assert all(sum(len(call["prompts"]) for call in cycles[c]) <= rows_per_cycle for c in cycles)
    for c in (1, 2, 3):
        batch = recorder.batches[c]
        old, mask = batch["old_per_token_logps"], batch["completion_mask"]
        probed_by = independent_logps(make_model(), cycles[c - 1][-1]["policy"], batch)
        generated_by = independent_logps(make_model(), cycles[c][0]["policy"], batch)
        stale = ((old - probed_by).abs() * mask).amax(1) < 1e-4
        fresh = ((old - generated_by).abs() * mask).amax(1) < 1e-4
        assert bool((stale | fresh).all()) and not bool((stale & fresh).any())
        assert int(stale.sum()) == int(
            trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation * K / G
        )
    assert ds_logs(trainer)[-1][N.DYNAMIC_SAMPLING_CARRIED_PROBES] == 0


REFILL_PIPELINE = dict(dynamic_sampling_screen_generations=K, dynamic_sampling_pipeline=True)


def test_with_refill_a_step_whose_carried_probes_fill_its_batch_makes_one_call(make_model, tokenizer, tmp_path):
    """Refill (no fixed budget): the carried probes are sized so that the next step finds its groups among them
    (``dynamic_sampling_carry_fill_chance``); such a step makes one call, and every batch is full of informative groups."""
    trainer, _, _ = build(make_model, tokenizer, tmp_path, kinds_dataset(KINDS, 16), max_steps=8, **REFILL_PIPELINE)
    calls = record_calls(trainer)
    trainer.train()
    steps = per_step(calls)
    logs = ds_logs(trainer)
    assert all(h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] == 2 and h[N.DYNAMIC_SAMPLING_FILLED_GROUPS] == 0 for h in logs)
    for step in range(1, 8):
        if logs[step - 1][N.DYNAMIC_SAMPLING_CARRIED_PROBES] >= 2:  # enough carried: one call
            assert len(steps[step]) == 1
    assert sum(len(steps[step]) == 1 for step in range(1, 8)) >= 6
    assert_pipelined_funnel(logs)


def test_with_refill_a_short_step_completes_its_own_carry_rounds_probes(make_model, tokenizer, tmp_path):
    """Refill, probes capped at the batch's groups (``max_oversample=1``): a step whose carried prompts leave its
    batch short makes another call, which completes what it misses from the probes of its own carry round (the same
    policy) and probes anew for the next step."""
    trainer, _, recorder = build(
        make_model,
        tokenizer,
        tmp_path,
        kinds_dataset(KINDS, 16),
        max_steps=8,
        dynamic_sampling_max_oversample=1.0,
        **REFILL_PIPELINE,
    )
    calls = record_calls(trainer)
    trainer.train()
    steps = per_step(calls)
    logs = ds_logs(trainer)
    assert all(h[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] == 2 for h in logs)
    short = [step for step in range(1, 8) if len(steps[step]) > 1]
    completed_in_step = set()
    for step in short:
        trained = set(tokenizer.batch_decode(recorder.batches[step]["prompt_ids"], skip_special_tokens=True))
        carried = set(steps[step - 1][-1]["prompts"])  # probed by the previous step's last call
        earlier = {prompt for call in steps[step][:-1] for prompt in call["prompts"]} - carried
        assert trained <= carried | earlier  # nothing older than the previous step's last call
        completed_in_step |= trained & earlier
    assert completed_in_step  # some short step trained prompts its own earlier call probed
    assert_pipelined_funnel(logs)


def test_carried_rows_without_kept_table_entries_show_as_none():
    """A carry written without its table entries (a checkpoint of a run whose table was off) still gives one entry
    per carried row, so the table's rebuild finds every row."""
    from trl_dapo_ext.dynamic_sampling.carry import shared_logs

    logs, stride = shared_logs(None, 3)
    assert stride == 3 and logs["prompt"] == logs["completion"] == [None] * 3 and logs["extra"] == {}
    kept = {"prompt": ["a", "b"], "completion": ["x", "y"], "extra": {"id": [1, 2]}}
    assert shared_logs(kept, 2) == (kept, 2)
