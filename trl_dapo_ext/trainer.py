"""`DAPOTrainer`: TRL's `GRPOTrainer` with DAPO's extensions, each switched on by a `DAPOConfig` field.

A short orchestration: the math is in `core` (advantages, overlong penalty, group outcomes, diagnostics values), the
refill machinery in `dynamic_sampling`; this class wires them into the TRL methods listed in its docstring, each of
which calls ``super()`` (no TRL code is copied). Every private TRL name it relies on is listed and checked in
`compat.py`.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from trl import GRPOTrainer

from . import compat
from .backends import check_vllm_sampling_seed, check_vllm_server_device
from .config import DAPOConfig, as_dapo_config
from .core.advantages import combine_rewards, group_advantages, normalize_then_sum_advantages
from .core.metrics import (
    TOKEN_MEAN_METRICS,
    blank_token_means,
    completion_lengths,
    truncated_completions,
)
from .core.overlong import OverlongPenalty, penalty_only_where_scored
from .diagnostics import Diagnostics
from .dynamic_sampling.assembly import LOSS_SCALE_KEY, RoundRows, ScoredRound, assemble
from .dynamic_sampling.rounds import build_dynamic_sampler, with_prompt_index
from .dynamic_sampling.sampler import DynamicSampler
from .dynamic_sampling.screening_rounds import collector_class
from .dynamic_sampling.state import micro_steps_per_cycle, resume_dynamic_sampling, save_dynamic_sampling
from .generation_budget import (
    BudgetMeter,
    GenerationBudgetCallback,
    on_completions,
    plain_step_completions,
    resume_generation_budget,
    save_generation_budget,
    schedule_steps,
)
from .launch import check_launch
from .positions import check_left_padding, parameters_are_partitioned
from .reward_guard import guarded

# DAPOTrainer.__init__ takes exactly these parameters (of the installed TRL release).
_GRPO_INIT_SIGNATURE = inspect.signature(GRPOTrainer.__init__)


class DAPOTrainer(GRPOTrainer):
    """Drop-in `trl.GRPOTrainer` with DAPO extensions; see `DAPOConfig` for the fields that switch them on.

    The `GRPOTrainer` seams it overrides (each pinned in `compat.py`), and why:

    * ``__init__``: takes exactly ``GRPOTrainer.__init__``'s parameters (its signature is copied, so a new TRL parameter
      passes through); accepts a plain ``trl.GRPOConfig``; appends the overlong penalty as one more reward function (so
      it is added to the reward before advantages, logged on its own, and works with every generation backend); builds
      the two objects it owns: ``self.dynamic_sampling`` (`dynamic_sampling.sampler.DynamicSampler`) and
      ``self.diagnostics`` (`diagnostics.Diagnostics`), each None when its field is off.
    * ``_calculate_rewards``: calls ``super()`` and keeps the gathered ``(N_global, n_funcs)`` reward matrix and the
      round's completions, which TRL does not return from a generation round; while it runs, each reward function is
      guarded so that an exception it raises names the function and the step (`reward_guard`; errors from elsewhere
      pass unchanged).
      With overlong shaping it returns the matrix with the penalty NaN on rows that no task reward scored, so TRL's
      own rule for unscorable rows (every column NaN: left out of the baseline, advantage 0) holds for them, in every
      path that reads the matrix (TRL's advantages, this package's estimators, dynamic sampling's batch). It also
      records each completion's length as TRL's ``completions/*_length`` count it (the model's tokens).
    * ``_generate_and_score_completions``: without dynamic sampling, one ``super()`` call, then the configured advantage
      estimator. With it (training only), ``super()`` once per generation round, keeping the informative groups, until
      the batch is full or the round budget is spent; then advantages, ``num_items_in_batch`` and TRL's batch metrics
      are recomputed on the batch actually trained on. That loop is `dynamic_sampling.rounds.BatchCollector` (one per
      step), which hands each round's gathered counts to ``self.dynamic_sampling`` for the next round's decision, and
      the batch assembly `dynamic_sampling.assembly`.
    * ``_save_rng_state`` / ``train``: every process writes ``self.dynamic_sampling``'s state dict (stream position,
      planner estimates, reward range, prompt history) and TRL's micro-step count beside its RNG state in each
      checkpoint, and inside a generation cycle the rest of the generation batch; ``train`` restores them when
      resuming, so the resumed run trains the same micro-batches and generates at the same steps
      (`dynamic_sampling.state`).
    * ``compute_loss``: with dynamic sampling, calls ``super()``. In a batch with masked fill groups and a loss type
      that divides by its rows (``grpo``, ``sapo``, ``luspo``, ``dr_grpo``), the advantages and the KL coefficient
      are scaled for that call so that the masked rows leave the denominator: the update is the one of the batch
      without them (`core.loss`). For a micro-batch without a single loss token (only masked fill groups), TRL's
      token-mean metrics (``entropy``, clip ratios) become NaN: TRL would log 0.
    * ``_generate``, ``_prepare_inputs``, ``training_step``: each calls ``super()`` inside a section of the step timer
      (``diagnostics=True``: the ``time/`` split, `diagnostics`); without diagnostics the timer is a no-op.
      ``_generate`` also keeps the tool mask it returns, before ``mask_truncated_completions`` zeroes truncated rows
      of it: the recomputed ``completions/*_length`` and the ``length/`` metrics count a truncated completion's
      tokens, as TRL does.

    * ``create_scheduler`` (``max_generated_completions`` only): the step schedule of the plain GRPO steps that
      generate the budget, evaluated at the completions charged so far (``self.budget_meter``: each generation batch
      as its micro-batches are trained, saved in checkpoints) instead of the step count (`generation_budget`).

    Loss, generation, optimizer and logging stay TRL's. With every extension field at its default, the trainer
    computes exactly what ``trl.GRPOTrainer`` computes.

    Example:
        >>> from trl_dapo_ext import DAPOConfig, DAPOTrainer
        >>> args = DAPOConfig("out", dynamic_sampling=True, overlong_buffer_length=64)  # doctest: +SKIP
        >>> DAPOTrainer(model, reward_funcs=[my_reward], args=args, train_dataset=ds).train()  # doctest: +SKIP
    """

    _tag_names = ["trl", "grpo", "dapo"]

    def __init__(self, *args: Any, **kwargs: Any):
        # Bound against GRPOTrainer's own signature: whatever TRL accepts (positional or keyword) is accepted, and
        # anything else is refused with TRL's TypeError.
        bound = _GRPO_INIT_SIGNATURE.bind(self, *args, **kwargs)
        params = bound.arguments
        config = params.get("args")
        if config is None:  # TRL's default, as a DAPOConfig
            model = params["model"]
            model_name = model if isinstance(model, str) else compat.get_config_model_id(model.config)
            config = DAPOConfig(f"{model_name.split('/')[-1]}-GRPO")
        config = params["args"] = as_dapo_config(config)
        check_vllm_server_device(config)  # before TRL waits for a server whose weight sync cannot work here
        check_vllm_sampling_seed(config)  # before TRL builds an engine whose groups would all be identical
        if config.dynamic_sampling and params.get("train_dataset") is not None:
            params["train_dataset"] = with_prompt_index(params["train_dataset"])
        super().__init__(*bound.args[1:], **bound.kwargs)
        check_launch(self.accelerator)  # before N lone processes (or DDP instead of DeepSpeed) start training
        compat.check_private_attributes(self)
        compat.check_log_buffers(self)
        args = self.args

        self._last_round: ScoredRound | None = None
        self._generated_tool_mask: list | None = None  # of the latest _generate call (None: no tools)
        # Columns of the reward matrix that score the task (everything but our overlong penalty).
        self.task_reward_indices = list(range(len(self.reward_funcs)))
        self.overlong_column: int | None = None  # the penalty's column, appended last
        if args.overlong_buffer_length is not None:
            self._append_reward_function(
                OverlongPenalty(args.max_completion_length, args.overlong_buffer_length, args.overlong_penalty_factor)
            )
            self.overlong_column = len(self.reward_funcs) - 1
        # Dynamic sampling's state across steps (refill stream, planner, prompt history, reward range); None when off.
        self.dynamic_sampling: DynamicSampler | None = build_dynamic_sampler(self) if args.dynamic_sampling else None
        # Re-padded rows must mean what they meant in their round (`positions`): probed as soon as the weights are in
        # the module, at construction, or at the first step under DeepSpeed ZeRO-3 (its engine gathers them).
        self._left_padding_unchecked = args.dynamic_sampling
        if args.dynamic_sampling and not parameters_are_partitioned(self.model):
            self._check_left_padding()
        self.diagnostics: Diagnostics | None = Diagnostics(self) if args.diagnostics else None
        # Completions generated in training so far, every process's (the same on every rank): max_generated_completions
        # stops the run and runs the lr schedule on it (`generation_budget`).
        self.generated_completions = 0
        # What the budget has been charged: each generation batch as its micro-batches are trained.
        self.budget_meter = BudgetMeter(micro_steps_per_cycle(args))
        if args.max_generated_completions is not None:
            self.add_callback(GenerationBudgetCallback(self))

    __init__.__signature__ = _GRPO_INIT_SIGNATURE  # what help() and inspect show: TRL's parameters

    def _append_reward_function(self, reward_func, weight: float = 1.0) -> None:
        # After super().__init__ (its reward_weights length check counts only the user's functions), the same way
        # TRL itself appends environment rewards.
        self.reward_funcs.append(reward_func)
        self.reward_func_names.append(reward_func.__name__)
        self.reward_processing_classes.append(None)
        self.reward_weights = torch.cat([self.reward_weights, torch.tensor([weight], dtype=torch.float32)])

    # ------------------------------------------------------------------------------------------------------------
    # Rewards and advantages of one round
    # ------------------------------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Only the reward functions' own exceptions are renamed: an OOM or a collective's error raised elsewhere in
        # TRL's method (e.g. gathering the reward matrix) passes through unchanged.
        user_funcs = self.reward_funcs
        self.reward_funcs = [
            guarded(func, name, self._where) for func, name in zip(user_funcs, self.reward_func_names)
        ]
        try:
            with self._timed("reward"):
                rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        finally:
            self.reward_funcs = user_funcs
        if self.overlong_column is not None:
            # The length penalty shapes a task reward; where none scored the row, it must stay unscorable (TRL: every
            # column NaN) instead of being trained on its length alone. TRL computes its advantages from this return.
            rewards_per_func = penalty_only_where_scored(
                rewards_per_func, self.overlong_column, self.task_reward_indices
            )
        tool_mask = self._generated_tool_mask
        if tool_mask is not None and len(tool_mask) != len(completion_ids_list):
            raise RuntimeError(
                f"trl {compat.trl_version()}: _generate returned {len(tool_mask)} tool-mask rows for "
                f"{len(completion_ids_list)} scored completions; trl_dapo_ext must be updated for this code path (see "
                "trl_dapo_ext/compat.py)."
            )
        self._last_round = ScoredRound(
            rewards_per_func=rewards_per_func,
            completion_ids=completion_ids_list,
            lengths=completion_lengths(completion_ids_list, tool_mask),
            truncated=truncated_completions(completion_ids_list, {*self.eos_token_ids, self._tokenizer.pad_token_id}),
        )
        return rewards_per_func

    def _check_left_padding(self) -> None:
        check_left_padding(self.model, self.args, self.beta, self._tokenizer.pad_token_id)
        self._left_padding_unchecked = False

    def _where(self) -> str:
        """When a reward function runs, for its error message: the step being generated for, counted from 1."""
        if self.model.training:
            return f"training step {self.state.global_step + 1}"
        return f"evaluation after training step {self.state.global_step}"

    def _scored_round(
        self, rows: list[dict[str, Any]], need_rewards: bool = True
    ) -> tuple[dict[str, Any], ScoredRound | None]:
        """One TRL generation round on ``rows``: its output dict and what `_calculate_rewards` recorded of it."""
        self._last_round = None  # so that a round which never scores cannot pass off the previous round's rewards
        self._generated_tool_mask = None  # nor the previous round's tool mask
        output = super()._generate_and_score_completions(rows)
        if self.model.training:  # every process generates as many rows in a round
            self.generated_completions += len(rows) * self.accelerator.num_processes
            self.budget_meter.add(len(rows) * self.accelerator.num_processes)
        if need_rewards and self._last_round is None:
            raise RuntimeError(
                f"trl {compat.trl_version()}: GRPOTrainer._generate_and_score_completions returned without calling "
                "_calculate_rewards, so this round's rewards are unknown and its advantages cannot be recomputed. "
                "trl_dapo_ext must be updated for this code path (see trl_dapo_ext/compat.py); meanwhile set the "
                "DAPO fields to their defaults."
            )
        return output, self._last_round

    def _record_old_logps(self, output: dict[str, Any]) -> None:
        """Pipelined screening: ``old_per_token_logps`` of ``output``'s rows under the policy that generated them,
        when TRL skipped them (on-policy it reads the loss pass's own, detached). A carried probe row is trained one
        step later, against these. One no-grad forward pass that plain GRPO does not make: over the carried rows
        alone where every process may run its own (`carried_logps_only`), else over each pipelined round."""
        if output.get("old_per_token_logps") is not None:
            return
        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                input_ids,
                attention_mask,
                output["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size,
            )
        output["old_per_token_logps"] = logps

    @property
    def carried_logps_only(self) -> bool:
        """Whether pipelined screening computes old log-probabilities for its carried rows alone, marking the other
        rows `assembly.ON_POLICY` for `compute_loss` to fill. Not where a forward pass is collective (ZeRO-3, FSDP:
        the processes carry different numbers of rows) nor with Liger's loss, which reads them itself."""
        sharded = self.is_fsdp_enabled or (
            self.is_deepspeed_enabled and self.accelerator.state.deepspeed_plugin.zero_stage == 3
        )
        return not (sharded or self.args.use_liger_kernel)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, torch.Tensor | Any]:
        if self.model.training:  # TRL makes one generation batch per steps_per_generation * num_iterations
            self.budget_meter.start_cycle()
        if self.dynamic_sampling is not None and self.model.training:
            if self._left_padding_unchecked:
                self._check_left_padding()
            return collector_class(self.args)(self, inputs).collect()
        diagnose = self.args.diagnostics and self.model.training
        masking = self.args.mask_unscored_completions and self.model.training
        needed = self.args.recomputes_advantages or diagnose or masking
        output, scored = self._scored_round(inputs, need_rewards=needed)
        if masking:
            output = self._masked_unscored(output, scored, len(inputs))
        elif self.args.recomputes_advantages:
            advantages = self._advantages(scored.rewards_per_func)
            self._replace_logged_advantages(advantages)
            output["advantages"] = self._local_rows(advantages, len(inputs))
        if diagnose:
            self.diagnostics.log_batch(
                attempted=[scored.rewards_per_func],
                update_rewards=self._local_rows(scored.rewards_per_func, len(inputs)),
                lengths=scored.lengths,
                truncated=scored.truncated,
                batch=output,
                completion_ids=scored.completion_ids,
                generated_completion_ids=[scored.completion_ids],
            )
        return output

    def _masked_unscored(self, output: dict[str, Any], scored: ScoredRound, count: int) -> dict[str, Any]:
        """``mask_unscored_completions``: the round's batch with its unscored rows masked, as dynamic sampling masks
        its fill groups (`assembly.assemble`: loss mask, token denominator, row-count scale, advantages)."""
        round_rows = RoundRows(output, scored, self._local_rows(scored.rewards_per_func, count), 1, count)
        batch, rows = assemble(
            [round_rows.take(torch.arange(count))],
            pad_token_id=self._tokenizer.pad_token_id,
            accelerator=self.accelerator,
            advantages=self._advantages,
            loss_type=self.args.loss_type,
            mask_unscored=True,
        )
        self._replace_logged_advantages(rows.global_advantages)
        return batch

    # ------------------------------------------------------------------------------------------------------------
    # Diagnostics (groups/, length/, cost/, time/), only with diagnostics=True
    # ------------------------------------------------------------------------------------------------------------

    def _timed(self, section: str):
        return self.diagnostics.timed(section) if self.diagnostics is not None else nullcontext()

    def _generate(self, prompts: list):
        with self._timed("generation"):
            generated = super()._generate(prompts)
        # The tool mask as generated: TRL counts its length metrics on it, then (mask_truncated_completions) zeroes
        # the rows of truncated completions in the batch it returns, where their lengths could no longer be read.
        self._generated_tool_mask = compat.generated_tool_mask(generated)
        return generated

    def _prepare_inputs(self, generation_batch):
        # Rollout work that is neither generation nor reward: log-prob passes, padding, batch assembly.
        with self._timed("scoring"):
            micro_batch = super()._prepare_inputs(generation_batch)
        if self.model.training:  # one micro-batch of the current generation batch is trained on
            self.budget_meter.consume()
        return micro_batch

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # Only masked rows (dynamic sampling's fill groups, unscored completions) can leave a batch without loss tokens.
        if not (self.args.dynamic_sampling or self.args.mask_unscored_completions):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        metrics = self._metrics["train" if self.model.training else "eval"]
        marks = {key: len(metrics[key]) for key in TOKEN_MEAN_METRICS if key in metrics}
        scale = inputs.get(LOSS_SCALE_KEY)
        beta = self.beta
        if scale is not None:
            # Masked fill rows still count in the row count that grpo/sapo/luspo/dr_grpo divide by (core/loss.py).
            # Both terms that share that denominator, the policy term and the KL term, are scaled; the entropy
            # bonus and the router's aux loss are not divided by rows and stay. A positive factor on the advantages
            # scales the policy term exactly: it is linear in A, TRL's clipping takes the min of two multiples of A,
            # and sapo's temperature and the off-policy mask read only A's sign. A new dict, since TRL reuses the
            # buffered micro-batch (num_iterations > 1).
            inputs = {**inputs, "advantages": inputs["advantages"] * scale}
            self.beta = beta * float(scale)
        try:
            with self._on_policy_rows_filled(inputs) as inputs:
                loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            self.beta = beta
        loss_mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        if int(self.accelerator.gather(loss_mask.sum().reshape(1)).sum()) == 0:  # no loss token on any process
            blank_token_means(metrics, marks)
        return loss

    @contextmanager
    def _on_policy_rows_filled(self, inputs: dict[str, Any]):
        """Yield ``inputs`` (a new dict when it holds `assembly.ON_POLICY` rows) for TRL's loss, in which those rows'
        old log-probabilities are the loss pass's own, detached: TRL's loss computes the policy's per-token
        log-probabilities, then reads ``old_per_token_logps``, so the first computation fills them. The marked
        rows' ratio is then 1, as on an on-policy batch (`tests/test_pipeline.py` checks it for every loss type)."""
        old = inputs.get("old_per_token_logps")
        if old is None or not bool(torch.isnan(old).any()):
            yield inputs
            return
        inputs = dict(inputs)  # TRL reuses the buffered micro-batch (num_iterations > 1): leave it marked
        compute = self._get_per_token_logps_and_entropies
        patched = "_get_per_token_logps_and_entropies" in vars(self)  # already replaced on the instance (tests)

        def filling(*args, **kwargs):
            logps, *rest = compute(*args, **kwargs)
            marked = inputs["old_per_token_logps"]
            inputs["old_per_token_logps"] = torch.where(torch.isnan(marked), logps.detach(), marked)
            self._get_per_token_logps_and_entropies = compute  # only the loss pass's own computation fills
            return (logps, *rest)

        self._get_per_token_logps_and_entropies = filling
        try:
            yield inputs
        finally:
            if patched:
                self._get_per_token_logps_and_entropies = compute
            else:
                del self._get_per_token_logps_and_entropies  # back to the class's method

    def training_step(self, model, inputs, num_items_in_batch=None):
        with self._timed("update"):  # forward and backward; nested rollout sections are charged to themselves
            return super().training_step(model, inputs, num_items_in_batch)

    def _advantages(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """Advantages of every row of a gathered reward matrix, with the configured estimator and aggregation."""
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        if self.args.multi_objective_aggregation == "normalize_then_sum":
            return normalize_then_sum_advantages(rewards_per_func, self.reward_weights, num_generations)
        return group_advantages(
            combine_rewards(rewards_per_func, self.reward_weights),
            num_generations,
            estimator=self.args.advantage_estimator,
            scale=self.args.scale_rewards,
            std=self.args.reward_std,
        )

    def _local_rows(self, global_rows: torch.Tensor, local_count: int) -> torch.Tensor:
        start = self.accelerator.process_index * local_count
        return global_rows[start : start + local_count]

    def _replace_logged_advantages(self, advantages: torch.Tensor) -> None:
        # The completions table (log_completions) should show the advantages actually trained on.
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())

    # ------------------------------------------------------------------------------------------------------------
    # Checkpointing of the refill stream
    # ------------------------------------------------------------------------------------------------------------

    def _save_rng_state(self, output_dir: str) -> None:
        # Trainer calls this on every process (not only those that save the model), into the checkpoint folder
        # it just created: each process's refill state lands beside its own RNG state, also with save_on_each_node
        # or a trial's own run folder. A failed write raises (OSError) instead of leaving a checkpoint that would
        # resume with another refill stream.
        super()._save_rng_state(output_dir)
        if self.dynamic_sampling is not None:
            save_dynamic_sampling(self, output_dir)
        if self.args.max_generated_completions is not None:
            save_generation_budget(self, output_dir)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        if self.dynamic_sampling is not None and resume_from_checkpoint:
            resume_dynamic_sampling(self, resume_from_checkpoint)
        if self.args.max_generated_completions is not None and resume_from_checkpoint:
            resume_generation_budget(self, resume_from_checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    # ------------------------------------------------------------------------------------------------------------
    # Runs bounded by generation (max_generated_completions)
    # ------------------------------------------------------------------------------------------------------------

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.args.max_generated_completions is None:
            return super().create_scheduler(num_training_steps, optimizer)
        # The schedule of the plain GRPO steps that generate the budget, evaluated at completions generated.
        per_step = plain_step_completions(self.args)
        scheduler = super().create_scheduler(schedule_steps(self.args.max_generated_completions, per_step), optimizer)
        if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
            raise TypeError(
                f"max_generated_completions runs the lr schedule on generated completions and needs a LambdaLR, but "
                f"the trainer's scheduler is a {type(scheduler).__name__}. Use a transformers lr_scheduler_type "
                "(not reduce_lr_on_plateau) and no scheduler of your own, or drop max_generated_completions."
            )
        if not getattr(scheduler, "_dapo_on_completions", False):  # once, though DeepSpeed may ask again
            scheduler.lr_lambdas = on_completions(scheduler.lr_lambdas, self.budget_meter.charged, per_step)
            scheduler._dapo_on_completions = True
        return scheduler
