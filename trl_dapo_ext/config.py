"""`DAPOConfig`: TRL's `GRPOConfig` plus the DAPO extension fields, every one off by default.

Each field carries a ``help`` text, so ``TrlParser`` / ``HfArgumentParser`` expose it as a CLI flag and a YAML key.
Invalid combinations fail here, at construction, with a message naming the field and the fix.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
from dataclasses import dataclass, field

from trl import GRPOConfig

from .core.advantages import ESTIMATORS, STD_KINDS
from .generation_budget import plain_step_completions, schedule_steps


@dataclass
class DAPOConfig(GRPOConfig):
    r"""Configuration class for `DAPOTrainer`: every `trl.GRPOConfig` parameter, plus the fields below.

    With the new fields at their defaults, training is identical to `trl.GRPOTrainer`. Groups: advantage estimation
    (`advantage_estimator`, `reward_std`), overlong reward shaping (DAPO, Yu et al. 2025, Eq. 13: `overlong_*`),
    dynamic sampling (DAPO Sec. 3.2, Eq. 11: `dynamic_sampling*`) and diagnostics (`diagnostics*`).

    Parameters:
        advantage_estimator (str): `"grpo"`: reward minus the group mean. `"loo"`: reward minus the mean of the other
            scorable siblings (REINFORCE leave-one-out, an unbiased baseline). TRL's `scale_rewards` still decides
            the division.
        reward_std (str): Standard deviation used by `scale_rewards`: `"sample"` (divisor G-1, TRL's choice) or
            `"population"` (divisor G).
        overlong_buffer_length (int | None): Width `L_cache` (tokens) of the soft-penalty zone before
            `max_completion_length`. `None` disables shaping. A completion that no task reward scored (all returned
            None) gets no penalty: it stays unscorable, left out of the advantages as TRL leaves it without shaping.
        overlong_penalty_factor (float): Penalty at the length limit; it falls linearly from 0 to
            `-overlong_penalty_factor` across the buffer.
        dynamic_sampling (bool): Drop prompt groups whose task reward does not vary and generate more until the
            update batch holds the configured number of informative groups.
        dynamic_sampling_reward_funcs (list[str] | None): Reward functions (names or indices) that decide whether a
            group is informative; default: every task reward function (never the overlong penalty).
        dynamic_sampling_std_tolerance (float): A group is informative when the population std of its filter reward
            exceeds this.
        dynamic_sampling_max_rounds (int): Generation rounds allowed per optimizer batch, the first included (veRL's
            `max_num_gen_batches`).
        dynamic_sampling_oversample (float | None): `None`: the adaptive planner sizes each round to minimise the
            expected cost of finishing the step (a round costs a fixed latency plus its completions). A number: fixed
            first-round size as a multiple of the batch's groups (DAPO used 3x).
        dynamic_sampling_max_oversample (float): Adaptive planner: largest round as a multiple of the batch's groups.
        dynamic_sampling_round_latency (float): Adaptive planner: the fixed cost of one generation round in
            completion-equivalents (a round of n completions costs this + n).
        dynamic_sampling_measure_latency (bool): Adaptive planner: fit that latency from the run's own round times
            instead.
        dynamic_sampling_confidence (float | None): Adaptive planner: `None` sizes rounds by their expected cost; a
            number in (0, 1) uses the older fill-chance rule instead.
        dynamic_sampling_retention_decay (float): Adaptive planner: weight each earlier step keeps in the retention
            estimate (forgetting).
        dynamic_sampling_max_groups_per_step (int | None): Generation budget per process per step, in prompt groups
            (the batch's own included), with either round sizing: the planner plans within it, and a fixed first
            round (`dynamic_sampling_oversample`) is cut to it.
        dynamic_sampling_skip_window (int): Skip refill prompts that were zero-variance in their last k groups;
            0 = off.
        dynamic_sampling_skip_floor (float): Exploration floor of that skipping: the chance that a skippable prompt
            is generated anyway.
        dynamic_sampling_history_from (str | None): A `trl-dapo profile` table (`prompts.jsonl`) of this training
            dataset: seeds the prompt history (and so the planner's strata and skipping) with each prompt's measured
            outcome before the first step.
        dynamic_sampling_on_exhausted (str): When the budget runs out: `"error"` raises with the counts; `"fill"`
            completes the batch with the closest uninformative groups, masked out of the loss, and warns once. The
            masked rows leave the denominator of every `loss_type`: the update is TRL's for the batch without them
            (with `bnpo`, a micro-batch of only masked rows still counts in TRL's average over micro-batches; see
            docs/dynamic-sampling.md).
        dynamic_sampling_screen_generations (int | None): Screening: generate this many completions per prompt first
            (a divisor of `num_generations`) and complete a prompt to `num_generations` in the next round of the same
            step only when its probes' rewards differ; a prompt whose probes agree is dropped at that cost. `None`:
            every prompt gets a full group at once.
        dynamic_sampling_fixed_budget (bool): Every step generates at most what plain GRPO generates (the batch's
            rows per process) and trains on every informative group it found; the rest of the batch is masked out of
            the loss. Without screening: GRPO's own groups with the zero-variance ones masked (no refill).
        dynamic_sampling_pipeline (bool): Pipelined screening (with `dynamic_sampling_screen_generations`): a
            step's one generation call completes the prompts whose probes the previous step's call made and probes
            the prompts of the next step; the carried probe rows keep the log-probabilities of the policy that
            generated them (one step off-policy). Under `dynamic_sampling_fixed_budget` every step after the first
            makes one call; with refill a step whose carried prompts leave its batch short makes another. A "step"
            is a generation cycle (`steps_per_generation * num_iterations` micro-batches); with
            `max_generated_completions`, a cycle that a plain cycle's completions would take to the budget probes
            nothing for a next one.
        dynamic_sampling_carry_fill_chance (float): Pipelined screening with refill: the chance that a step's probes
            for the next step hold the next batch's groups (fewer calls per step when higher, more probes dropped).
        max_generated_completions (int | None): Bound the run by generation instead of steps: stop at the first
            optimizer step end at which the completions charged so far (every round and process, the count logged
            as `dynamic_sampling/generated_completions`; a generation batch charged as its micro-batches are trained)
            reach this, and run the lr schedule on completions (the schedule of `ceil(budget / per_step)` plain GRPO
            steps evaluated at `charged / per_step`). `max_steps` left at -1 becomes that step count (see
            `trl_dapo_ext.generation_budget`).
        mask_unscored_completions (bool): Completions a reward function left unscored (None) are masked out of the
            loss, its token denominator, the KL term and the advantage statistics.
        diagnostics (bool): Log the `groups/`, `length/`, `cost/` and `time/` metrics every step; training itself is
            unchanged.
        diagnostics_success_threshold (float): A completion counts as correct when its task reward is at least this
            (pass@k, all-correct/all-wrong split).
        diagnostics_pass_k (int | None): The k of `groups/pass@k`; `None` means `num_generations`.
    """

    advantage_estimator: str = field(
        default="grpo",
        metadata={
            "help": "Baseline subtracted from each reward: 'grpo' (group mean, TRL's behaviour) or 'loo' (mean of "
            "the other scorable siblings, REINFORCE leave-one-out). scale_rewards still decides the division.",
            "choices": list(ESTIMATORS),
        },
    )
    reward_std: str = field(
        default="sample",
        metadata={
            "help": "Standard deviation used when scale_rewards divides: 'sample' (Bessel, divisor G-1, TRL's "
            "behaviour) or 'population' (divisor G, the DeepSeekMath formula).",
            "choices": list(STD_KINDS),
        },
    )
    overlong_buffer_length: int | None = field(
        default=None,
        metadata={
            "help": "DAPO overlong reward shaping: width in tokens of the soft-penalty buffer before "
            "max_completion_length (L_cache in DAPO Eq. 13). The penalty is added to the reward before advantages "
            "and logged as rewards/overlong_penalty; a completion no task reward scored (all None) gets none and "
            "stays out of the advantages. None disables it."
        },
    )
    overlong_penalty_factor: float = field(
        default=1.0,
        metadata={
            "help": "DAPO overlong reward shaping: penalty at the length limit; it falls linearly from 0 to "
            "-overlong_penalty_factor across the buffer."
        },
    )

    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO dynamic sampling: drop prompt groups whose task reward does not vary and keep generating "
            "until the update batch holds the configured number of informative groups (within "
            "dynamic_sampling_max_rounds)."
        },
    )
    dynamic_sampling_reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions (names as logged under rewards/, or indices) whose weighted sum decides whether "
            "a group is informative. Default: every task reward function; the overlong penalty never counts."
        },
    )
    dynamic_sampling_std_tolerance: float = field(
        default=0.0,
        metadata={"help": "A group is informative when the population std of its filter reward exceeds this."},
    )
    dynamic_sampling_max_rounds: int = field(
        default=10,
        metadata={
            "help": "Generation rounds allowed per optimizer batch, the first included (veRL: max_num_gen_batches)."
        },
    )
    dynamic_sampling_oversample: float | None = field(
        default=None,
        metadata={
            "help": "None: the adaptive planner sizes every round from the observed retention rate to minimise the "
            "expected cost of finishing the step (see dynamic_sampling_round_latency). A number: fixed first-round "
            "size as a multiple of the batch's prompt groups (DAPO used 3); later rounds ask for the missing groups "
            "over the observed retention."
        },
    )
    dynamic_sampling_max_oversample: float = field(
        default=4.0,
        metadata={
            "help": "Adaptive planner: largest round as a multiple of the batch's groups (one generation call)."
        },
    )
    dynamic_sampling_round_latency: float = field(
        default=16.0,
        metadata={
            "help": "Adaptive planner: the fixed cost of one generation round (waiting for the longest completion, "
            "weight sync, reward start-up) in completion-equivalents: a round of n completions costs this + n. 0 "
            "sizes rounds like one-by-one replacement, a large value like one big batch. With "
            "dynamic_sampling_measure_latency it is the prior until the run's own rounds measure it."
        },
    )
    dynamic_sampling_measure_latency: bool = field(
        default=False,
        metadata={
            "help": "Adaptive planner: fit the round latency from this run's measured round times (robust fit over "
            "the last 64 rounds). Plans then follow the machine's speed, so two runs with one seed can draw different "
            "refill prompts; the measured value is logged either way (dynamic_sampling/measured_round_latency)."
        },
    )
    dynamic_sampling_confidence: float | None = field(
        default=None,
        metadata={
            "help": "Adaptive planner: None sizes rounds by their expected cost. A number in (0, 1) uses the older "
            "rule instead: the smallest round whose chance to fill the batch on every process reaches it."
        },
    )
    dynamic_sampling_retention_decay: float = field(
        default=0.8,
        metadata={"help": "Adaptive planner: weight kept by each earlier step in the retention estimate (0..1)."},
    )
    dynamic_sampling_max_groups_per_step: int | None = field(
        default=None,
        metadata={
            "help": "Generation budget per process per step in prompt groups, the batch's own included; None: only "
            "dynamic_sampling_max_rounds limits it. It bounds both round sizings: the planner plans within it, and a "
            "fixed first round (a number for dynamic_sampling_oversample) is cut to it."
        },
    )
    dynamic_sampling_skip_window: int = field(
        default=0,
        metadata={
            "help": "Prompt-history skipping: refill prompts whose last k groups were all zero-variance are skipped "
            "(with probability 1 - dynamic_sampling_skip_floor). 0 disables it."
        },
    )
    dynamic_sampling_skip_floor: float = field(
        default=0.1,
        metadata={
            "help": "Prompt-history skipping: chance that a skippable prompt is generated anyway (exploration)."
        },
    )
    dynamic_sampling_history_from: str | None = field(
        default=None,
        metadata={
            "help": "Path to a trl-dapo profile table (prompts.jsonl) of this same training dataset: seeds the prompt "
            "history with each prompt's measured pass rate before the first step."
        },
    )
    dynamic_sampling_on_exhausted: str = field(
        default="error",
        metadata={
            "help": "When the round budget runs out before the batch is full: 'error' raises with the counts; 'fill' "
            "completes the batch with the closest uninformative groups, masked out of the loss (they leave every "
            "loss_type's denominator), and warns once.",
            "choices": ["error", "fill"],
        },
    )
    dynamic_sampling_screen_generations: int | None = field(
        default=None,
        metadata={
            "help": "Screening (SPEED-RL, arXiv 2506.09016): generate this many completions per prompt first (a "
            "divisor of num_generations, at least 2) and complete a prompt to num_generations in the next round of "
            "the same step, with the same policy, only when its probes' rewards differ; a prompt whose probes all "
            "agree is dropped having cost this many completions. None: every prompt gets a full group at once."
        },
    )
    dynamic_sampling_fixed_budget: bool = field(
        default=False,
        metadata={
            "help": "Generate at most what plain GRPO generates per step (per_device_train_batch_size * "
            "steps_per_generation completions per process), spent on screening and completion, and train on every "
            "informative group found: the rest of the batch is masked out of the loss. Without screening: the "
            "batch's own groups, the zero-variance ones masked (no refill)."
        },
    )
    dynamic_sampling_pipeline: bool = field(
        default=False,
        metadata={
            "help": "Pipelined screening (SPEED-RL's single inference call; needs dynamic_sampling_screen_generations): "
            "each step makes one generation call that completes the prompts probed in the previous step's call and "
            "probes the prompts of the next step. The carried probe rows keep the log-probabilities of the policy "
            "that generated them, so the loss clips them as one step off-policy. The run's first step makes two "
            "calls and its last step completes what it probes. With refill (no dynamic_sampling_fixed_budget) the "
            "probes are sized so that the next step finds its groups among them 9 times in 10; a step that does "
            "not makes another call."
        },
    )
    dynamic_sampling_carry_fill_chance: float = field(
        default=0.9,
        metadata={
            "help": "Pipelined screening with refill (no dynamic_sampling_fixed_budget): the chance that the probes "
            "a step makes for the next step hold the next batch's groups (a binomial quantile at the estimated "
            "mixed share). A step that finds too few makes another generation call. Higher: fewer calls per step "
            "(about 1 + (1 - chance)), more probes dropped; lower: the reverse."
        },
    )

    max_generated_completions: int | None = field(
        default=None,
        metadata={
            "help": "Bound the run by generation: stop at the first optimizer step end at which the completions "
            "charged so far (every generation round of every process, with or without dynamic sampling: the count "
            "logged as dynamic_sampling/generated_completions; a generation batch is charged as its micro-batches "
            "are trained) reach this, and run the lr schedule on the same unit: "
            "the schedule of ceil(budget / per_step) plain GRPO steps, evaluated at completions / per_step, where "
            "per_step is what a plain GRPO step generates (generation_batch_size * gradient_accumulation_steps / "
            "(steps_per_generation * num_iterations)). max_steps left at -1 becomes ceil(budget / per_step) (so "
            "num_train_epochs is ignored, as with any max_steps); a given max_steps stays a cap on optimizer steps "
            "(without dynamic sampling it must be at least that). None: bounded by max_steps / num_train_epochs."
        },
    )

    mask_unscored_completions: bool = field(
        default=False,
        metadata={
            "help": "Mask out of the loss every completion that a reward function left unscored (returned None: no "
            "verdict, e.g. a code sandbox that could not run). Its tokens leave the loss, its token denominator and "
            "the KL term, and its reward leaves the advantage statistics. Off (TRL's behaviour), such a completion "
            "gets advantage 0 only when every reward function returned None, and its tokens stay in the "
            "denominator and the KL term (open-instruct's mask_infra_failed_completions)."
        },
    )

    diagnostics: bool = field(
        default=False,
        metadata={
            "help": "Log the groups/, length/, cost/ and time/ diagnostics every step (training is unchanged; the "
            "overhead is measured by benchmarks/diagnostics_overhead.py)."
        },
    )
    diagnostics_success_threshold: float = field(
        default=1.0,
        metadata={
            "help": "Diagnostics: a completion counts as correct when its task reward is at least this (for pass@k "
            "and the all-correct / all-wrong split; 1.0 suits 0/1 verifiers)."
        },
    )
    diagnostics_pass_k: int | None = field(
        default=None,
        metadata={"help": "Diagnostics: the k of groups/pass@k (unbiased estimator over the G samples); None = G."},
    )

    @property
    def recomputes_advantages(self) -> bool:
        """Whether the trainer replaces TRL's advantages with its own (leave-one-out, or the population std)."""
        return self.advantage_estimator != "grpo" or self.reward_std != "sample"

    def __post_init__(self):
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations"):
            value = getattr(self, name)  # checked first: TRL fails on a negative size only deep inside the trainer
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        super().__post_init__()  # resolves steps_per_generation / generation_batch_size first
        self._validate_extension_fields()

    # Kept separate so a plain GRPOConfig upgraded by `as_dapo_config` can be validated without re-running TRL's
    # __post_init__ (which rejects its own already-resolved batch fields).
    def __reduce_ex__(self, protocol):
        # An upgraded copy of a user's config class (see `as_dapo_config`) has a class made at run time, which
        # pickle cannot find by name: it is rebuilt from the user's class instead (Trainer pickles its args).
        source = type(self).__dict__.get("_upgraded_from")
        if source is None:
            return super().__reduce_ex__(protocol)
        return (_restore_upgraded, (source, dict(self.__dict__)))

    def _validate_extension_fields(self) -> None:
        if self.advantage_estimator not in ESTIMATORS:
            raise ValueError(
                f"advantage_estimator={self.advantage_estimator!r} is not supported: use 'grpo' (group mean) or "
                "'loo' (leave-one-out)."
            )
        if self.reward_std not in STD_KINDS:
            raise ValueError(
                f"reward_std={self.reward_std!r} is not supported: use 'sample' (divisor G-1) or 'population' "
                "(divisor G)."
            )
        if self.recomputes_advantages and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"advantage_estimator={self.advantage_estimator!r} / reward_std={self.reward_std!r} apply to the "
                "summed reward, but multi_objective_aggregation="
                f"{self.multi_objective_aggregation!r} normalises each reward function separately. Set "
                "multi_objective_aggregation='sum_then_normalize', or keep advantage_estimator='grpo' and "
                "reward_std='sample'."
            )
        self._validate_overlong_fields()
        self._validate_dynamic_sampling_fields()
        self._validate_generation_budget()
        if self.diagnostics_pass_k is not None and not 1 <= self.diagnostics_pass_k <= self.num_generations:
            raise ValueError(
                f"diagnostics_pass_k={self.diagnostics_pass_k} must be between 1 and num_generations="
                f"{self.num_generations} (pass@k is estimated from the G samples of each group), or None for G."
            )

    def _validate_overlong_fields(self) -> None:
        if self.overlong_buffer_length is None:
            return
        if self.max_completion_length is None:
            raise ValueError(
                "overlong_buffer_length needs a length limit: set max_completion_length (the L_max of DAPO Eq. 13), "
                "or set overlong_buffer_length=None to disable overlong shaping."
            )
        if isinstance(self.overlong_buffer_length, bool) or not isinstance(self.overlong_buffer_length, int):
            raise ValueError(
                f"overlong_buffer_length must be an int number of tokens, got {self.overlong_buffer_length!r}."
            )
        if not 0 < self.overlong_buffer_length < self.max_completion_length:
            raise ValueError(
                f"overlong_buffer_length={self.overlong_buffer_length} must be > 0 and < max_completion_length="
                f"{self.max_completion_length}: the buffer is the last part of the length budget. DAPO used 4096 "
                "of 20480; try about a fifth of max_completion_length, or None to disable shaping."
            )
        if not self.overlong_penalty_factor > 0:
            raise ValueError(
                f"overlong_penalty_factor={self.overlong_penalty_factor} must be > 0 (DAPO uses 1.0); to disable "
                "shaping set overlong_buffer_length=None."
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "overlong_buffer_length adds the length penalty to the summed reward before advantages (DAPO), "
                f"but multi_objective_aggregation={self.multi_objective_aggregation!r} would normalise the penalty "
                "on its own. Set multi_objective_aggregation='sum_then_normalize', or drop overlong shaping and add "
                "trl.rewards.get_soft_overlong_punishment as an ordinary reward function."
            )

    def _validate_generation_budget(self) -> None:
        """``max_generated_completions``: a positive int, a schedule that can run on completions, and ``max_steps``
        derived from it (left at -1) or consistent with it."""
        budget = self.max_generated_completions
        if budget is None:
            return
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(
                f"max_generated_completions={budget!r} must be an int >= 1 (completions generated, every process's), "
                "or None to bound the run by max_steps."
            )
        if self.lr_scheduler_type == "reduce_lr_on_plateau":
            raise ValueError(
                "max_generated_completions runs the lr schedule on generated completions, which needs a step "
                "schedule (a LambdaLR); lr_scheduler_type='reduce_lr_on_plateau' is not one. Choose another "
                "lr_scheduler_type (e.g. 'linear', 'cosine', 'constant') or drop max_generated_completions."
            )
        per_step = plain_step_completions(self)
        steps = schedule_steps(budget, per_step)
        # Plain GRPO, refill and the fixed budget without screening generate at least a plain step's completions
        # every step (the batch's own groups come first; a fixed budget of full groups is exactly a plain step), so
        # the plain step count bounds the run; screening can generate fewer.
        at_least_plain = not self.dynamic_sampling or self.dynamic_sampling_screen_generations is None
        if self.max_steps is None or self.max_steps < 0:
            if not at_least_plain:
                raise ValueError(
                    f"max_generated_completions={budget} with screening (dynamic_sampling_screen_generations): a "
                    f"step can generate fewer completions than a plain GRPO step's {per_step:g}, so max_steps cannot "
                    f"be derived from the budget. Set max_steps to the most optimizer steps you allow (the budget "
                    f"takes {steps} plain steps; e.g. max_steps={2 * steps})."
                )
            self.max_steps = steps
        elif not self.dynamic_sampling and self.max_steps < steps:
            raise ValueError(
                f"max_steps={self.max_steps} and max_generated_completions={budget} disagree: plain GRPO generates "
                f"{per_step:g} completions a step, so the budget takes {steps} steps and max_steps would end the run "
                "first. Leave max_steps at -1 (derived from the budget), or drop max_generated_completions."
            )

    def _validate_dynamic_sampling_fields(self) -> None:
        if not self.dynamic_sampling:
            for name in ("dynamic_sampling_history_from", "dynamic_sampling_screen_generations"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} is a dynamic sampling setting; set dynamic_sampling=True or drop it.")
            for name in ("dynamic_sampling_fixed_budget", "dynamic_sampling_pipeline"):
                if getattr(self, name):
                    raise ValueError(f"{name} is a dynamic sampling setting; set dynamic_sampling=True or drop it.")
            return
        self._validate_round_sizing()
        self._validate_group_selection()

    def _validate_round_sizing(self) -> None:
        """The fields that size the rounds: their count, the oversampling, the planner's knobs and the budget."""
        if isinstance(self.dynamic_sampling_max_rounds, bool) or not (
            isinstance(self.dynamic_sampling_max_rounds, int) and self.dynamic_sampling_max_rounds >= 1
        ):
            raise ValueError(
                f"dynamic_sampling_max_rounds={self.dynamic_sampling_max_rounds!r} must be an int >= 1 (generation "
                "rounds per optimizer batch, the first included; DAPO used 10)."
            )
        if self.dynamic_sampling_oversample is not None and not self.dynamic_sampling_oversample >= 1.0:
            raise ValueError(
                f"dynamic_sampling_oversample={self.dynamic_sampling_oversample} must be >= 1.0 or None (adaptive): "
                "the first round must generate at least the batch's own prompt groups (DAPO used 3.0)."
            )
        if not self.dynamic_sampling_max_oversample >= 1.0:
            raise ValueError(
                f"dynamic_sampling_max_oversample={self.dynamic_sampling_max_oversample} must be >= 1.0 (a round holds "
                "at least the batch's own groups)."
            )
        latency = self.dynamic_sampling_round_latency
        if isinstance(latency, bool) or not isinstance(latency, int | float) or not 0 <= latency < math.inf:
            raise ValueError(
                f"dynamic_sampling_round_latency={latency!r} must be a finite number >= 0: the fixed cost of one "
                "generation round in completion-equivalents (0: rounds are free, 16: the default)."
            )
        if self.dynamic_sampling_confidence is not None and not 0.0 < self.dynamic_sampling_confidence < 1.0:
            raise ValueError(
                f"dynamic_sampling_confidence={self.dynamic_sampling_confidence} must lie strictly between 0 and 1 "
                "(0.95: one round in twenty needs a second)."
            )
        if not 0.0 <= self.dynamic_sampling_retention_decay <= 1.0:
            raise ValueError(
                f"dynamic_sampling_retention_decay={self.dynamic_sampling_retention_decay} must be in [0, 1]."
            )
        local_groups = self.per_device_train_batch_size * self.steps_per_generation // self.num_generations
        budget = self.dynamic_sampling_max_groups_per_step
        if budget is not None and self.dynamic_sampling_fixed_budget:
            raise ValueError(
                f"dynamic_sampling_max_groups_per_step={budget} and dynamic_sampling_fixed_budget=True both set the "
                "step's budget; the fixed budget is what plain GRPO generates. Keep one of them."
            )
        if budget is not None and budget < local_groups:
            raise ValueError(
                f"dynamic_sampling_max_groups_per_step={budget} is below the {local_groups} prompt groups every batch "
                "needs per process; raise it or set None."
            )

    def _validate_group_selection(self) -> None:
        """The fields that decide which prompts and groups enter a batch, and what happens when too few do."""
        if self.dynamic_sampling_skip_window < 0 or not 0.0 <= self.dynamic_sampling_skip_floor <= 1.0:
            raise ValueError(
                f"dynamic_sampling_skip_window={self.dynamic_sampling_skip_window} must be >= 0 (0 = off) and "
                f"dynamic_sampling_skip_floor={self.dynamic_sampling_skip_floor} in [0, 1]."
            )
        if self.dynamic_sampling_history_from is not None and not os.path.isfile(self.dynamic_sampling_history_from):
            raise ValueError(
                f"dynamic_sampling_history_from={self.dynamic_sampling_history_from!r} does not exist; give the "
                "prompts.jsonl that `trl-dapo profile --output-dir DIR` wrote, or None."
            )
        if not self.dynamic_sampling_std_tolerance >= 0:
            raise ValueError(
                f"dynamic_sampling_std_tolerance={self.dynamic_sampling_std_tolerance} must be >= 0 (0 keeps every "
                "group whose reward varies at all)."
            )
        if self.dynamic_sampling_on_exhausted not in ("error", "fill"):
            raise ValueError(
                f"dynamic_sampling_on_exhausted={self.dynamic_sampling_on_exhausted!r} is not supported: use "
                "'error' or 'fill'."
            )
        local_rows = self.per_device_train_batch_size * self.steps_per_generation
        if local_rows % self.num_generations != 0:
            raise ValueError(
                f"dynamic_sampling needs whole prompt groups on every process, but per_device_train_batch_size * "
                f"steps_per_generation = {self.per_device_train_batch_size} * {self.steps_per_generation} = "
                f"{local_rows} is not a multiple of num_generations={self.num_generations}. Make "
                "per_device_train_batch_size (or gradient_accumulation_steps / steps_per_generation) a multiple of "
                "num_generations divided by their common factors, e.g. per_device_train_batch_size="
                f"{self.num_generations}."
            )
        self._validate_screening()
        self._validate_pipeline()
        if self.dynamic_sampling_reward_funcs is not None and not self.dynamic_sampling_reward_funcs:
            raise ValueError(
                "dynamic_sampling_reward_funcs=[] selects no reward function; leave it None to use every task reward."
            )

    def _validate_screening(self) -> None:
        """Screening's probes (``dynamic_sampling_screen_generations``) and the rounds that screening or the fixed
        budget size themselves."""
        screen = self.dynamic_sampling_screen_generations
        if screen is not None and (
            isinstance(screen, bool)
            or not isinstance(screen, int)
            or not 2 <= screen < self.num_generations
            or self.num_generations % screen
        ):
            raise ValueError(
                f"dynamic_sampling_screen_generations={screen!r} must be an int of at least 2 that divides "
                f"num_generations={self.num_generations} and is smaller than it (a prompt's probes, completed to a "
                "full group in rounds of that many rows; SPEED-RL used 4 of 24), or None to screen nothing."
            )
        screening = screen is not None or self.dynamic_sampling_fixed_budget
        for name in ("dynamic_sampling_oversample", "dynamic_sampling_confidence"):
            if screening and getattr(self, name) is not None:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} sizes refill rounds, but with dynamic_sampling_screen_generations "
                    "or dynamic_sampling_fixed_budget the rounds are sized from the share of mixed probes (and the "
                    f"budget); leave {name}=None."
                )
        if screen is not None and self.dynamic_sampling_max_rounds < 2:
            raise ValueError(
                f"dynamic_sampling_screen_generations={screen} completes a prompt in the round after its probes, but "
                f"dynamic_sampling_max_rounds={self.dynamic_sampling_max_rounds} allows one round; raise it to at "
                "least 2."
            )

    def _validate_pipeline(self) -> None:
        """Pipelined screening: what it builds on, and the settings it does not support yet."""
        if not self.dynamic_sampling_pipeline:
            return
        if self.dynamic_sampling_screen_generations is None:
            raise ValueError(
                "dynamic_sampling_pipeline=True carries screening probes from one step's generation call to the "
                "next: set dynamic_sampling_screen_generations (e.g. num_generations // 2), or drop "
                "dynamic_sampling_pipeline."
            )
        if not 0.0 < self.dynamic_sampling_carry_fill_chance < 1.0:
            raise ValueError(
                f"dynamic_sampling_carry_fill_chance={self.dynamic_sampling_carry_fill_chance} is a probability: set "
                "it between 0 and 1, both excluded (0.9 by default)."
            )


def as_dapo_config(args: GRPOConfig) -> DAPOConfig:
    """Return ``args`` as a `DAPOConfig`; a plain ``trl.GRPOConfig`` gets every extension field at its default.

    This lets `DAPOTrainer` accept the config of an unchanged TRL script. A `DAPOConfig` is returned as it is. Any
    other config becomes a copy whose class derives from both `DAPOConfig` and the config's own class (so a user's
    ``GRPOConfig`` subclass keeps its fields and methods); every field value is deep-copied, so changing the copy's
    lists or dicts leaves ``args`` untouched. (The device state that ``TrainingArguments`` sets up once per process
    is not a field and stays shared.)

    Example:
        >>> import trl
        >>> plain = trl.GRPOConfig("out", use_cpu=True, bf16=False, reward_weights=[1.0])  # doctest: +SKIP
        >>> upgraded = as_dapo_config(plain)  # doctest: +SKIP
        >>> upgraded.reward_weights.append(0.5); plain.reward_weights  # doctest: +SKIP
        [1.0]
    """
    if isinstance(args, DAPOConfig):
        return args
    if not isinstance(args, GRPOConfig):
        raise TypeError(f"args must be a trl.GRPOConfig or DAPOConfig, got {type(args).__name__}")
    upgraded = _upgraded_class(type(args)).__new__(_upgraded_class(type(args)))
    upgraded.__dict__.update(args.__dict__)
    for item in dataclasses.fields(upgraded):
        if item.name in args.__dict__:
            setattr(upgraded, item.name, copy.deepcopy(args.__dict__[item.name]))
        elif item.default is not dataclasses.MISSING:  # an extension field
            setattr(upgraded, item.name, item.default)
        else:
            setattr(upgraded, item.name, item.default_factory())
    upgraded._validate_extension_fields()
    return upgraded


@functools.cache
def _upgraded_class(config_class: type) -> type:
    """`DAPOConfig` itself for ``trl.GRPOConfig``; for a user's subclass, one dataclass deriving from both."""
    if config_class is GRPOConfig:
        return DAPOConfig
    name = f"DAPO{config_class.__name__}"
    upgraded = dataclass(type(name, (DAPOConfig, config_class), {"__module__": __name__, "__qualname__": name}))
    upgraded._upgraded_from = config_class
    return upgraded


def _restore_upgraded(config_class: type, state: dict) -> DAPOConfig:
    """Unpickle an upgraded copy of a user's config class (that class is pickled by reference, as usual)."""
    upgraded = _upgraded_class(config_class)
    config = upgraded.__new__(upgraded)
    config.__dict__.update(state)
    return config
