"""`trl-dapo demo`: a tiny model learns two-digit addition with DAPO on a CPU, with nothing downloaded.

The whole pipeline, end to end, in a few minutes on 2 cores:

1. data: ``"a+b="`` problems with answers written GSM8K style (``#### 81``); a held-out split is kept apart;
2. model: a ~0.5M-parameter Qwen2-architecture model and a character tokenizer, built locally;
3. warm start: a short supervised fine-tune (TRL's ``SFTTrainer``) on an imperfect teacher's answers (a quarter of
   their digits wrong), which teaches the answer format and leaves RL room to go past the teacher;
4. RL: ``DAPOTrainer`` with dynamic sampling, the library's ``reward_funcs.math_reward`` as verifier, and
   diagnostics on;
5. evaluation before and after RL on the held-out split (greedy, sampled, pass@k), a before/after table, and the
   ``trl-dapo report`` dashboard in the output directory.

``--compare`` trains a second policy from the same warm start with plain GRPO settings and prints both side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from trl_dapo_ext.cli.demo_progress import (
    PROGRESS_FILE,
    RL_COST_FILE,
    WARM_START_DIR,
    DemoProgress,
    DemoResumeError,
    read_progress,
    record_interrupt,
    start_progress,
)
from trl_dapo_ext.cli.errors import report_error
from trl_dapo_ext.cli.interrupts import (
    INTERRUPTED_DIR,
    RunInterrupted,
    report_interrupt,
    resume_command,
    save_on_interrupt,
)
from trl_dapo_ext.cpu_threads import openmp_settings, parse_threads, resolve_threads

SIZES = {
    "tiny": dict(hidden_size=64, num_layers=2, intermediate_size=256),
    "small": dict(hidden_size=128, num_layers=2, intermediate_size=512),
}


@dataclass
class DemoSettings:
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
    # count auto picks is printed and recorded in demo_results.json. Two make a step about 1.45x faster than one on a
    # quiet 2-core machine; a thread on a core another process holds makes every parallel region wait for it.
    threads: int | str = "auto"
    compare: bool = False


# --threads auto never picks more: the README's results and the 1.45x speed-up of two threads were measured on 2
# cores, and more threads were never measured with this model (--threads N goes beyond).
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


def main(argv: list[str] | None = None, prog: str = "trl-dapo demo") -> int:
    d, q = DemoSettings, QUICK
    quick = ", ".join(f"{key} {value:g}" for key, value in QUICK.items())
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--output-dir",
        default=d.output_dir,
        help=f"where checkpoints, logs and report.png go (default {d.output_dir})",
    )
    parser.add_argument(
        "--seed", type=int, default=d.seed, help=f"seed of data, model and sampling (default {d.seed})"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help=f"RL steps (default {d.rl_steps}; {q['rl_steps']} with --quick)"
    )
    parser.add_argument(
        "--sft-steps",
        type=int,
        default=None,
        help="a fixed number of warm-start steps (default: until greedy accuracy on warm-start problems reaches "
        f"{d.warm_start_target * 100:.0f}%%, at most {d.sft_steps} steps)",
    )
    parser.add_argument(
        "--model-size", choices=sorted(SIZES), default=None, help=f"model size (default {d.model_size})"
    )
    parser.add_argument("--compare", action="store_true", help="also train with plain GRPO settings and compare")
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help=f"RL learning rate (default {d.learning_rate:g}; {q['learning_rate']:g} with --quick)",
    )
    parser.add_argument(
        "--teacher-noise",
        type=float,
        default=None,
        help="probability that the warm-start teacher writes a wrong digit, per answer digit "
        f"(default {d.teacher_noise:g}; {q['teacher_noise']:g} with --quick)",
    )
    parser.add_argument(
        "--threads",
        type=parse_threads,
        default=None,
        help=f"torch threads: a number, or auto (the default: the cores other processes leave free, at most "
        f"{AUTO_THREADS_AT_MOST}; {q['threads']} with --quick). The count is printed and recorded in "
        "demo_results.json; results repeat exactly for the same count",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run of a few minutes that checks the pipeline, not learning: {quick} (other flags still win)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted demo in --output-dir (give the flags it started with): finished stages are "
        "skipped, the stage Ctrl-C stopped continues from its checkpoint; the results are the uninterrupted run's",
    )
    options = parser.parse_args(argv)
    if options.teacher_noise is not None:
        try:
            check_teacher_noise(options.teacher_noise, name="--teacher-noise")
        except ValueError as error:
            parser.error(str(error))

    settings = DemoSettings(output_dir=options.output_dir, seed=options.seed, compare=options.compare)
    if options.quick:
        for key, value in QUICK.items():
            setattr(settings, key, value)
    # Explicit flags win over --quick's settings.
    for flag, field in (
        ("model_size", "model_size"),
        ("steps", "rl_steps"),
        ("threads", "threads"),
        ("teacher_noise", "teacher_noise"),
    ):
        if getattr(options, flag) is not None:
            setattr(settings, field, getattr(options, flag))
    if options.sft_steps is not None:
        settings.sft_steps, settings.warm_start_target = options.sft_steps, None
    if options.learning_rate is not None:
        settings.learning_rate = options.learning_rate
    try:
        run_demo(settings, resume=options.resume)
    except DemoResumeError as error:
        return report_error(prog, error, debug=False)
    except (RunInterrupted, KeyboardInterrupt) as error:
        return _report_demo_interrupt(error, settings.output_dir, prog, argv)
    if options.quick:
        print(QUICK_NOTE)
    return 0


def _report_demo_interrupt(error: BaseException, output_dir: str, prog: str, argv: list[str] | None) -> int:
    """Say what was saved and, when anything can be reused, the command that resumes the demo; returns 130."""
    resumable = isinstance(error, RunInterrupted) and error.resumable
    # A second Ctrl-C's model-only save cannot be resumed: an earlier checkpoint of the stage, if any, still can.
    progress = record_interrupt(output_dir, error.folder) if resumable else read_progress(output_dir)
    # Between stages (data, evaluation) only what earlier stages wrote exists: say what that is.
    saved = sorted(str(path.parent) for path in Path(output_dir).glob("**/model.safetensors"))
    status = report_interrupt(
        error,
        prog,
        nothing_saved="no training stage was running; "
        + ("saved so far: " + ", ".join(saved) if saved else "nothing was saved yet"),
    )
    if progress is not None and progress.finished_anything():
        print(f"resume with: {resume_command(prog, argv, '--resume')}", file=sys.stderr, flush=True)
    return status


# ---------------------------------------------------------------------------------------------------------------------
# Data, model, evaluation
# ---------------------------------------------------------------------------------------------------------------------


def make_problems(count: int, seed: int) -> list[dict[str, str]]:
    """Distinct two-digit additions ``a+b=`` (10 <= a, b <= 99) with GSM8K-style answers, in a seeded order."""
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(seed).shuffle(pairs)
    return [{"prompt": f"{a}+{b}=", "answer": str(a + b), "completion": f"#### {a + b}"} for a, b in pairs[:count]]


def check_teacher_noise(noise: float, name: str = "teacher noise") -> None:
    """Raises ``ValueError`` unless ``noise`` is a probability below 1 (at 1 every answer digit would be wrong)."""
    if not 0.0 <= noise < 1.0:
        raise ValueError(f"{name} must be in [0, 1) (a probability per answer digit), got {noise}")


def imperfect_teacher(rows: list[dict[str, str]], noise: float, seed: int) -> list[dict[str, str]]:
    """``rows`` whose completions replace each answer digit by a different random digit with probability ``noise``.

    The ``answer`` column stays right: only what the warm start imitates is noisy, never what the verifier checks.

    >>> rows = imperfect_teacher(make_problems(1000, seed=0), noise=0.25, seed=0)
    >>> rows[1]
    {'prompt': '31+51=', 'answer': '82', 'completion': '#### 53'}
    >>> sum(r["completion"] == "#### " + r["answer"] for r in rows) / len(rows)  # 0.75**2 to 0.75**3
    0.457
    """
    check_teacher_noise(noise)
    rng = random.Random(1000 + seed)

    def noisy(digit: str) -> str:
        return digit if rng.random() >= noise else rng.choice([d for d in "0123456789" if d != digit])

    return [{**row, "completion": "#### " + "".join(noisy(d) for d in row["answer"])} for row in rows]


def split_problems(settings: DemoSettings) -> tuple[list[dict[str, str]], list[dict[str, str]], list[dict[str, str]]]:
    """The demo's three disjoint splits of one seed: held-out problems, warm-start rows (the teacher's, noisy), RL rows.

    >>> held_out, sft_rows, rl_rows = split_problems(DemoSettings())
    >>> len(held_out), len(sft_rows), len(rl_rows)
    (500, 3800, 3800)
    """
    problems = make_problems(settings.num_problems, settings.seed)
    held_out, rest = problems[: settings.held_out], problems[settings.held_out :]
    sft_rows, rl_rows = rest[: len(rest) // 2], rest[len(rest) // 2 :]
    sft_rows = imperfect_teacher(sft_rows, settings.teacher_noise, settings.seed)  # noise 0: the clean answers
    return held_out, sft_rows, rl_rows


def build_tokenizer_and_model(size: str, seed: int):
    from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm

    # <bos> first, as GRPOTrainer tokenizes prompts with the tokenizer's special tokens: the warm start must match.
    # "#### " is one token, so a completion is the anchor, the digits and <eos>: every sampled token but one matters.
    tokenizer = build_char_tokenizer(alphabet="0123456789+=# ", add_bos=True, words=("#### ",))
    model = build_tiny_causal_lm(tokenizer, num_heads=4, max_positions=64, seed=seed, **SIZES[size])
    return tokenizer, model


@dataclass
class Evaluation:
    greedy: float
    sampled: float
    pass_at_k: float
    k: int


def generate(model, tokenizer, prompts: list[str], do_sample: bool, repeats: int = 1) -> list[str]:
    """Completions for ``prompts`` (each ``repeats`` times, next to each other), greedy or at temperature 1."""
    import torch

    texts = []
    for start in range(0, len(prompts), 256):
        chunk = [p for p in prompts[start : start + 256] for _ in range(repeats)]
        batch = tokenizer(chunk, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=6,
                do_sample=do_sample,
                temperature=1.0 if do_sample else None,
                top_k=0 if do_sample else None,
                top_p=1.0 if do_sample else None,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        texts += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return texts


def greedy_accuracy(model, tokenizer, problems, verifier) -> float:
    """Fraction of ``problems`` whose greedy completion the verifier accepts."""
    model.eval()
    rewards = verifier(
        generate(model, tokenizer, [p["prompt"] for p in problems], False), answer=[p["answer"] for p in problems]
    )
    model.train()
    return sum(1.0 for r in rewards if r == 1.0) / len(problems)


def evaluate(model, tokenizer, problems, samples: int, seed: int, verifier) -> Evaluation:
    """Held-out accuracy: greedy, one sample at temperature 1, and the unbiased pass@k over ``samples`` samples.

    The sampling generator is seeded with ``seed`` at every call, so evaluations before and after RL draw the same
    random numbers for the same prompts in the same order: a paired comparison, whose difference reflects the policy
    rather than the luck of the draw.
    """
    import torch

    from trl_dapo_ext.core.metrics import pass_at_k

    prompts = [p["prompt"] for p in problems]
    answers = [p["answer"] for p in problems]
    greedy = greedy_accuracy(model, tokenizer, problems, verifier)
    model.eval()
    torch.manual_seed(seed)
    sampled = verifier(
        generate(model, tokenizer, prompts, True, samples), answer=[a for a in answers for _ in range(samples)]
    )
    model.train()
    correct = torch.tensor(
        [sum(1.0 for r in sampled[i * samples : (i + 1) * samples] if r == 1.0) for i in range(len(prompts))]
    )
    return Evaluation(
        greedy=greedy,
        sampled=float(correct.sum()) / (len(prompts) * samples),
        pass_at_k=float(pass_at_k(torch.full_like(correct, samples), correct, samples).mean()),
        k=samples,
    )


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Restores torch's CPU random state on exit: an evaluation inside a training run leaves its random stream as it was.

    `evaluate` reseeds the generator for its paired draws; without this, a run evaluated along the way would train on
    other random numbers than the same run evaluated only at the end.
    """
    import torch

    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


# ---------------------------------------------------------------------------------------------------------------------
# Training stages
# ---------------------------------------------------------------------------------------------------------------------


def common_args(output_dir: str, seed: int) -> dict:
    # GRPOConfig/SFTConfig defaults (bf16, gradient checkpointing, lr 1e-6) are meant for GPUs and large models.
    from trl_dapo_ext.tiny import cpu_args

    return cpu_args(output_dir, seed=seed, data_seed=seed, logging_steps=5, save_only_model=True)


def warm_start(model, tokenizer, train_rows, settings: DemoSettings, resume_from: str | None = None) -> int:
    """Supervised warm start until greedy accuracy on warm-start problems reaches the target; returns its steps.

    A fixed step count gave warm starts from 26% to 61% greedy across seeds and CPUs (float kernels differ, and this
    stage is where accuracy climbs fastest), and RL from the weak ones gained little. Stopping at a target accuracy
    (checked every ``sft_check_every`` steps on warm-start problems, never on the held-out split) hands RL the same
    starting point everywhere. ``warm_start_target=None`` runs exactly ``sft_steps`` steps. ``resume_from``: a full
    checkpoint of this stage to continue from.
    """
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from reward_funcs import math_reward

    args = SFTConfig(
        **common_args(os.path.join(settings.output_dir, "sft"), settings.seed),
        max_steps=settings.sft_steps,
        per_device_train_batch_size=128,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        save_strategy="no",
        packing=False,
    )
    dataset = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in train_rows])
    probe = train_rows[: settings.sft_check_problems]
    target = settings.warm_start_target

    class StopAtTarget(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if target is None or state.global_step % settings.sft_check_every:
                return
            with preserved_rng():  # the check must not change the training run's random stream
                accuracy = greedy_accuracy(model, tokenizer, probe, math_reward)
            if accuracy >= target:
                control.should_training_stop = True

    trainer = SFTTrainer(
        model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=[StopAtTarget()]
    )
    with save_on_interrupt(trainer, os.path.join(args.output_dir, INTERRUPTED_DIR)):
        trainer.train(resume_from_checkpoint=resume_from)
    return trainer.state.global_step


# The demo's DAPO features on top of TRL's defaults (which already use the token-level loss, `loss_type="dapo"`).
DAPO_FEATURES: dict[str, Any] = dict(
    dynamic_sampling=True,
    dynamic_sampling_max_rounds=4,
    dynamic_sampling_on_exhausted="fill",
    epsilon_high=0.28,
)


def rl_config(settings: DemoSettings, name: str, features: dict[str, Any], **overrides: Any) -> Any:
    """The RL stage's `DAPOConfig` in ``settings.output_dir/name``: the demo's recipe, ``features``, then ``overrides``."""
    from trl_dapo_ext import DAPOConfig

    recipe = dict(
        **common_args(os.path.join(settings.output_dir, name), settings.seed),
        max_steps=settings.rl_steps,
        per_device_train_batch_size=settings.prompts_per_step * settings.num_generations,
        num_generations=settings.num_generations,
        max_completion_length=6,
        learning_rate=settings.learning_rate,
        warmup_steps=settings.warmup_steps,
        **_schedule(settings),
        beta=0.0,
        temperature=1.0,
        save_strategy="steps",
        save_steps=max(settings.rl_steps // 2, 1),
        save_total_limit=1,
        diagnostics=True,
    )
    return DAPOConfig(**{**recipe, **features, **overrides})


def rl_trainer(
    model, tokenizer, train_rows, args, verifier, trainer_class: type | None = None, callbacks: list | None = None
) -> tuple[Any, CountingReward]:
    """A `DAPOTrainer` (or ``trainer_class``) on ``train_rows``, and the `CountingReward` that wraps ``verifier``."""
    from datasets import Dataset

    from trl_dapo_ext import DAPOTrainer

    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in train_rows])
    counted = CountingReward(verifier)  # the verifier sees every generated completion, kept or not
    trainer = (trainer_class or DAPOTrainer)(
        model=model,
        reward_funcs=counted,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    return trainer, counted


def reinforce(
    model,
    tokenizer,
    train_rows,
    settings: DemoSettings,
    dapo: bool,
    verifier,
    name: str,
    resume_from: str | None = None,
):
    """The demo's RL stage, with `DAPO_FEATURES` or plain GRPO settings; returns the trainer and what it cost.

    ``resume_from``: a full checkpoint of this stage; the cost then includes what the interrupted run spent.
    """
    args = rl_config(settings, name, DAPO_FEATURES if dapo else {})
    trainer, counted = rl_trainer(model, tokenizer, train_rows, args, verifier)
    spent = json.loads((Path(resume_from) / RL_COST_FILE).read_text()) if resume_from else {}
    started = time.perf_counter()
    try:
        with save_on_interrupt(trainer, os.path.join(args.output_dir, INTERRUPTED_DIR)):
            trainer.train(resume_from_checkpoint=resume_from)
    except RunInterrupted as error:
        if error.resumable:  # the checkpoint keeps the cost so far, for the resumed run to add to
            so_far = dict(
                rl_seconds=spent.get("rl_seconds", 0.0) + time.perf_counter() - started,
                generated=spent.get("generated", 0) + counted.completions,
            )
            (Path(error.folder) / RL_COST_FILE).write_text(json.dumps(so_far))
        raise
    rl_seconds = spent.get("rl_seconds", 0.0) + time.perf_counter() - started
    trainer.save_state()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return trainer, dict(
        rl_seconds=rl_seconds,
        generated=spent.get("generated", 0) + counted.completions,
        frac_zero_variance_attempted=1 - logged_mean(logs, "groups/frac_mixed"),
        frac_zero_std_trained=logged_mean(logs, "frac_reward_zero_std"),
    )


def logged_mean(logs: list[dict], key: str) -> float:
    """The per-step mean of ``key`` over training logs that each average the steps since the previous log.

    Weighted by those steps: a Ctrl-C logs the steps before it (a shorter window), and the resumed run's mean must be
    the uninterrupted run's. 0 when nothing logged ``key``.

    >>> logged_mean([{"step": 3, "x": 1.0}, {"step": 5, "x": 0.0}, {"step": 10, "x": None}], "x")
    0.6
    """
    total = steps = previous = 0
    for log in logs:
        if log.get(key) is not None:
            total += log[key] * (log["step"] - previous)
            steps += log["step"] - previous
        previous = log["step"]
    return total / steps if steps else 0.0


def _schedule(settings: DemoSettings) -> dict:
    """The RL lr schedule: warm-up, constant, then a cosine decay to 0 over the last ``decay_steps`` steps."""
    decay = min(settings.decay_steps, settings.rl_steps - settings.warmup_steps)
    if decay <= 0:
        return dict(lr_scheduler_type="constant_with_warmup")  # constant after warmup_steps
    return dict(lr_scheduler_type="warmup_stable_decay", lr_scheduler_kwargs={"num_decay_steps": decay})


class CountingReward:
    """Wraps a reward function and counts the completions it scores (one call per generation round)."""

    def __init__(self, reward_func) -> None:
        self.reward_func = reward_func
        self.__name__ = getattr(reward_func, "__name__", "reward")
        self.completions = 0

    def __call__(self, completions, **kwargs) -> list:
        self.completions += len(completions)
        return self.reward_func(completions, **kwargs)


def run_demo(settings: DemoSettings, resume: bool = False) -> dict:
    """The demo in ``settings.output_dir``; with ``resume``, continued from what an interrupted run there saved."""
    # Measured before torch is imported and the run starts, while this process sleeps: only other processes count.
    threads = resolve_threads(settings.threads, at_most=AUTO_THREADS_AT_MOST)
    settings = replace(settings, threads=threads.threads)  # the results record the count that ran
    print(f"threads: {threads.describe()}")

    import torch

    from reward_funcs import math_reward

    torch.set_num_threads(settings.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)
    output = Path(settings.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    wall_start = time.perf_counter()

    held_out, sft_rows, rl_rows = split_problems(settings)
    teacher = sum(r["completion"] == "#### " + r["answer"] for r in sft_rows) / len(sft_rows)
    print(
        f"data: {len(held_out)} held out, {len(sft_rows)} warm start (teacher {teacher:.0%} right), "
        f"{len(rl_rows)} RL prompts (two-digit addition)"
    )

    progress = start_progress(output, asdict(settings), resume)

    tokenizer, model = build_tokenizer_and_model(settings.model_size, settings.seed)
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, vocabulary of {len(tokenizer)}")
    sft_steps = warm_start_stage(model, tokenizer, sft_rows, settings, progress)
    before = evaluate(model, tokenizer, held_out, settings.eval_samples, settings.seed, math_reward)
    warm_state = {k: v.clone() for k, v in model.state_dict().items()}

    results = {}
    variants = [("dapo", True)] + ([("grpo", False)] if settings.compare else [])
    for name, dapo in variants:
        if name in progress.results:  # finished before an interruption: its model, report and results are saved
            results[name] = progress.results[name]
            print(f"RL ({name}): finished before, results from {output / PROGRESS_FILE}")
            continue
        model.load_state_dict(warm_state)
        torch.manual_seed(settings.seed)
        results[name] = rl_stage(model, tokenizer, rl_rows, held_out, settings, dapo, name, progress)

    print_table(before, results, settings)
    summary = dict(
        settings=asdict(settings),
        sft_steps=sft_steps,
        before=asdict(before),
        results=results,
        wall_seconds=time.perf_counter() - wall_start,
        # how the thread count was chosen, and what decides how OpenMP workers wait (trl_dapo_ext/cpu_threads.py)
        threads=threads.as_dict(),
        openmp=openmp_settings(),
    )
    (output / "demo_results.json").write_text(json.dumps(summary, indent=2))
    print(
        f"report: {output / 'report.png'}    results: {output / 'demo_results.json'}    "
        f"wall time: {summary['wall_seconds']:.0f} s"
    )
    return summary


def warm_start_stage(model, tokenizer, sft_rows, settings: DemoSettings, progress: DemoProgress) -> int:
    """The warm start, saved in ``output_dir/sft/final`` and recorded; on resume its model loaded instead when done."""
    from safetensors.torch import load_model

    folder = Path(settings.output_dir) / WARM_START_DIR
    if progress.sft_steps is not None:
        load_model(model, str(folder / "model.safetensors"))
        print(f"warm start: {progress.sft_steps} steps, finished before: loaded {folder}")
        return progress.sft_steps
    sft_steps = warm_start(model, tokenizer, sft_rows, settings, resume_from=progress.checkpoint_of("sft"))
    model.save_pretrained(folder)
    progress.sft_steps, progress.checkpoint = sft_steps, None
    progress.save(settings.output_dir)
    print(f"warm start: {sft_steps} steps")
    return sft_steps


def rl_stage(model, tokenizer, rl_rows, held_out, settings: DemoSettings, dapo: bool, name: str, progress) -> dict:
    """One RL stage from the warm start (or from its checkpoint), evaluated; DAPO's also saves the model and report."""
    from reward_funcs import math_reward

    output = Path(settings.output_dir)
    stage = f"rl-{name}"
    trainer, cost = reinforce(
        model, tokenizer, rl_rows, settings, dapo, math_reward, stage, resume_from=progress.checkpoint_of(stage)
    )
    after = evaluate(model, tokenizer, held_out, settings.eval_samples, settings.seed, math_reward)
    result = dict(after=asdict(after), **cost)
    if dapo:
        trainer.save_model(str(output / "final"))
        from trl_dapo_ext.cli.report import build_report

        report = build_report(trainer.args.output_dir, out=output / "report.png")
        result["report"] = str(report.image)
    progress.results[name], progress.checkpoint = result, None
    progress.save(output)
    return result


def print_table(before: Evaluation, results: dict, settings: DemoSettings) -> None:
    print()
    print(f"held-out accuracy ({settings.held_out} problems)   greedy   sampled   pass@{before.k}")
    print(f"  after warm start               {before.greedy:7.1%}  {before.sampled:7.1%}  {before.pass_at_k:7.1%}")
    for name, result in results.items():
        after = result["after"]
        label = "after RL, DAPO features" if name == "dapo" else "after RL, plain GRPO"
        print(f"  {label:<30} {after['greedy']:7.1%}  {after['sampled']:7.1%}  {after['pass_at_k']:7.1%}")
    if len(results) > 1:
        print()
        print("same RL steps             sampled gain  per 1k completions  per RL minute  zero-variance groups")
        for name, result in results.items():
            gain = (result["after"]["sampled"] - before.sampled) * 100
            print(
                f"  {name:<22} {gain:+10.1f} pt  {gain / result['generated'] * 1000:+15.2f} pt  "
                f"{gain / (result['rl_seconds'] / 60):+10.2f} pt  {result['frac_zero_variance_attempted']:17.1%}"
            )


if __name__ == "__main__":
    sys.exit(main())
