"""The tasks of the equal-compute ablation (`ablation.py --task`): the demo's additions, and a mixed-difficulty set.

Both use the demo's model, tokenizer, warm start (an imperfect teacher, until 50% greedy accuracy on warm-start
problems) and verifier (`reward_funcs.math_reward`); they differ in the problems.

* ``demo``: `trl-dapo demo`'s two-digit additions (500 held out, 3,800 warm-start rows, 3,800 RL prompts). After the
  warm start most groups of 8 have mixed rewards (about 83%), so selection can save little.
* ``mixed``: shaped like math RL, where most groups are all right or all wrong (SPEED-RL, arXiv 2506.09016, Fig. 2;
  Knapsack RL, arXiv 2509.25849). Three classes, each a third of the held-out split (stratified); the RL prompts
  are 1,000 easy, 1,000 medium and 1,400 hard:

  - **easy**: two-digit additions without a carry. The warm start learns them from a clean teacher, and the RL
    prompts of this class are warm-start problems: the policy mostly solves them (all-right groups);
  - **medium**: two-digit additions with a carry, from the demo's noisy teacher: the class RL can learn (mixed
    groups);
  - **hard**: a three-digit plus a two-digit number, never seen in the warm start: out of reach at first
    (all-wrong groups), partly reachable as the policy generalises.

  Held-out problems of every class are never trained on. Accuracy is reported per class and overall (the mean of
  the three classes, each 1/3 of the held-out split).

>>> from trl_dapo_ext.cli.demo import DemoSettings
>>> splits = task_splits("mixed", DemoSettings(seed=0))
>>> len(splits.held_out), len(splits.sft_rows), len(splits.rl_rows)
(600, 3000, 3400)
>>> sorted({row["class"] for row in splits.rl_rows}), splits.rl_rows[0]["class"] in CLASSES
(['easy', 'hard', 'medium'], True)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from trl_dapo_ext.cli.demo import DemoSettings
from trl_dapo_ext.cli.demo.data import imperfect_teacher, split_problems

TASKS = ("demo", "mixed")
CLASSES = ("easy", "medium", "hard")  # the mixed task's difficulty classes
ALL = "all"  # the demo task's one class

# The mixed task's split sizes, per class: held out, warm start, RL prompts.
HELD_OUT_PER_CLASS = 200
EASY_WARM_START = 1200  # clean answers; the easy RL prompts are drawn from these
MEDIUM_WARM_START = 1800  # the demo's noisy teacher
# RL prompts per class: the hard class is the largest, so that at the start at least half of GRPO's groups of 8 are
# zero-variance (about 50-55% measured after the warm start: hard ~100% all wrong, medium ~35%, easy ~7%).
RL_PROMPTS = {"easy": 1000, "medium": 1000, "hard": 1400}


@dataclass(frozen=True)
class TaskSplits:
    """Held-out problems, warm-start rows and RL prompts; every row has ``prompt``, ``answer`` and ``class``."""

    held_out: list[dict[str, str]]
    sft_rows: list[dict[str, str]]
    rl_rows: list[dict[str, str]]

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(row["class"] for row in self.held_out))


def _row(a: int, b: int, kind: str) -> dict[str, str]:
    return {"prompt": f"{a}+{b}=", "answer": str(a + b), "completion": f"#### {a + b}", "class": kind}


def _carries(a: int, b: int) -> bool:
    return a % 10 + b % 10 >= 10 or a // 10 + b // 10 >= 10


def mixed_splits(seed: int, teacher_noise: float) -> TaskSplits:
    """The mixed-difficulty task of ``seed`` (see the module docstring)."""
    rng = random.Random(seed)
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    rng.shuffle(pairs)
    easy = [_row(a, b, "easy") for a, b in pairs if not _carries(a, b)]
    medium = [_row(a, b, "medium") for a, b in pairs if _carries(a, b)]
    hard_pairs = [(a, b) for a in range(100, 1000) for b in range(10, 100)]
    hard = [_row(a, b, "hard") for a, b in rng.sample(hard_pairs, HELD_OUT_PER_CLASS + RL_PROMPTS["hard"])]
    n = HELD_OUT_PER_CLASS
    held_out = easy[:n] + medium[:n] + hard[:n]
    easy_sft = easy[n : n + EASY_WARM_START]
    medium_sft = imperfect_teacher(medium[n : n + MEDIUM_WARM_START], teacher_noise, seed)
    sft_rows = easy_sft + medium_sft
    rng.shuffle(sft_rows)
    medium_rl = medium[n + MEDIUM_WARM_START : n + MEDIUM_WARM_START + RL_PROMPTS["medium"]]
    rl_rows = rng.sample(easy_sft, RL_PROMPTS["easy"]) + medium_rl + hard[n:]
    rng.shuffle(rl_rows)
    return TaskSplits(held_out, sft_rows, rl_rows)


def task_splits(task: str, settings: DemoSettings) -> TaskSplits:
    """The splits of ``task`` for ``settings.seed``."""
    if task == "demo":
        held_out, sft_rows, rl_rows = split_problems(settings)
        label = lambda rows: [{**row, "class": ALL} for row in rows]  # noqa: E731
        return TaskSplits(label(held_out), label(sft_rows), label(rl_rows))
    if task == "mixed":
        return mixed_splits(settings.seed, settings.teacher_noise)
    raise ValueError(f"unknown task {task!r}; one of {', '.join(TASKS)}")


def evaluate_by_class(model, tokenizer, held_out: list[dict], samples: int, seed: int, verifier) -> dict:
    """The demo's paired held-out evaluation on each class of ``held_out``, and overall (the mean over classes).

    Returns ``{"overall": {...}, "by_class": {class: {...}}}`` with `evaluation.Evaluation`'s fields; for one class
    ``overall`` is that class's evaluation.
    """
    from dataclasses import asdict

    from trl_dapo_ext.cli.demo import evaluate

    classes = list(dict.fromkeys(row["class"] for row in held_out))
    by_class = {
        kind: asdict(evaluate(model, tokenizer, [r for r in held_out if r["class"] == kind], samples, seed, verifier))
        for kind in classes
    }
    if len(classes) == 1:
        return {"overall": by_class[classes[0]], "by_class": by_class}
    overall = {
        key: sum(result[key] for result in by_class.values()) / len(classes)
        for key in ("greedy", "sampled", "pass_at_k")
    }
    overall["k"] = samples
    return {"overall": overall, "by_class": by_class}
