"""The demo's settings: the defaults of a full run, what ``--quick`` changes, and the trainer arguments both stages
share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DemoSettings:
    """Everything a demo run depends on; ``demo_results.json`` and ``--resume`` record them."""

    output_dir: str = "runs/demo"
    seed: int = 0
    model_size: str = "small"
    num_problems: int = 10_000
    held_out: int = 500
    # Warm start until greedy accuracy on warm-start problems reaches the target, at most sft_steps steps (None: exactly
    # sft_steps). A fixed 200 steps ended anywhere from 26% to 51% greedy across seeds and CPUs; the target hands RL
    # about the same starting point everywhere.
    warm_start_target: float | None = 0.5
    # The warm start imitates an imperfect teacher: each digit of a warm-start answer is replaced by a different random
    # digit with this probability, so about half of the teacher's answers are wrong. Its policy knows the right answer
    # more often than it samples it, and RL with the verifier has to go past the teacher. From a clean teacher's
    # policy, an lr fast enough for a 5-minute run broke some seeds' policies within a few steps.
    teacher_noise: float = 0.25
    sft_steps: int = 600
    sft_check_every: int = 25
    sft_check_problems: int = 256
    # The longest completion generated, in new tokens: the RL stage's max_completion_length, the held-out
    # evaluation's and the warm start's check. The demo's answers ("#### " and up to three digits) fit in 6.
    completion_tokens: int = 6
    rl_steps: int = 500
    prompts_per_step: int = 16
    num_generations: int = 8
    learning_rate: float = 3e-4
    warmup_steps: int = 0  # linear learning-rate warm-up of the RL stage
    # The last decay_steps steps anneal the lr to 0 (cosine; 0: constant to the end). At a constant lr the held-out
    # accuracy of late checkpoints swung by up to 8 points from one 50-step checkpoint to the next; the decay settles
    # the policy on where it was heading.
    decay_steps: int = 200
    eval_samples: int = 8  # sampled completions per held-out problem (pass@k's k)
    # torch threads, or "auto": the cores other processes leave free, at most AUTO_THREADS_AT_MOST (see
    # trl_dapo_ext/cpu_threads.py). Results are deterministic for a seed, a kernel path and a thread count, so the
    # count auto picks is printed and recorded in demo_results.json. Two make a step faster than one on a quiet
    # 2-core machine; a thread on a core another process holds makes every parallel region wait for it.
    threads: int | str = "auto"
    compare: bool = False


# --threads auto never picks more: the README's results were measured with at most 2 threads on 2 cores, and more
# threads were never measured with this model (--threads N goes beyond).
AUTO_THREADS_AT_MOST = 2


# A smoke run that must gain on every seed and CPU: a clean teacher's warm start (fewer steps than the noisy one), then
# a short, gentle RL stage on one thread. At 2e-4 and above the first 100-150 steps of RL from that warm start can
# unsettle the policy (held-out accuracy dips before it gains); at 1e-4 with a warm-up it gained at every checkpoint.
# 500 problems x 8 samples, paired before/after: 4,000 completions each.
QUICK = dict(
    held_out=500,
    rl_steps=150,
    eval_samples=8,
    learning_rate=1e-4,
    warmup_steps=10,
    decay_steps=0,
    teacher_noise=0.0,
    threads=1,
)


QUICK_NOTE = (
    "note: --quick is a smoke run. It shows that every stage works end to end (warm start, DAPO with dynamic "
    "sampling and the math verifier, evaluation, report) and that 150 gentle RL steps raise sampled accuracy on "
    "the same held-out samples a little (a few points); greedy accuracy can move either way. The full demo (no "
    "--quick) is the learning result."
)


def common_args(output_dir: str, seed: int) -> dict:
    """The trainer arguments the warm start and the RL stage share: a CPU run in ``output_dir``, seeded."""
    # GRPOConfig/SFTConfig defaults (bf16, gradient checkpointing, lr 1e-6) are meant for GPUs and large models.
    from trl_dapo_ext.tiny import cpu_args

    return cpu_args(output_dir, seed=seed, data_seed=seed, logging_steps=5, save_only_model=True)
