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
* ``scratchpad`` (issue 52's task, `benchmarks/protocol.md`): additions of two n-digit numbers, n = 2 to 5 (four
  classes), whose completions write each column's total before the answer (`scratchpad_completion`), so a
  completion's length grows with its difficulty and generated tokens differ from generated completions; the
  verifier grades the final answer after ``####`` only. The warm start (on clean scratchpads) sees many 2- and
  3-digit problems, fewer 4-digit ones and a few 5-digit ones, and stops when its greedy accuracy on unseen 5-digit
  problems reaches a few percent, so that the hardest class starts at a small nonzero pass rate; 1,000 held-out
  problems per class and 1,000 RL prompts per class, all distinct (`SCRATCHPAD`).

>>> from trl_dapo_ext.cli.demo import DemoSettings
>>> splits = task_splits("mixed", DemoSettings(seed=0))
>>> len(splits.held_out), len(splits.sft_rows), len(splits.rl_rows)
(600, 3000, 3400)
>>> sorted({row["class"] for row in splits.rl_rows}), splits.rl_rows[0]["class"] in CLASSES
(['easy', 'hard', 'medium'], True)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from trl_dapo_ext.cli.demo import DemoSettings
from trl_dapo_ext.cli.demo.data import imperfect_teacher, split_problems

TASKS = ("demo", "mixed", "scratchpad")
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
class ScratchpadClass:
    """One class of the scratchpad task: its warm-start rows and its RL prompts (held-out: the task's per class)."""

    warm_start: int
    rl_prompts: int


@dataclass(frozen=True)
class ScratchpadTask:
    """The scratchpad task's shape: classes (by operand digits, easiest first), sizes and the warm start's length."""

    classes: dict[str, ScratchpadClass] = field(
        default_factory=lambda: {
            "2-digit": ScratchpadClass(warm_start=2500, rl_prompts=1000),
            "3-digit": ScratchpadClass(warm_start=2500, rl_prompts=1000),
            "4-digit": ScratchpadClass(warm_start=800, rl_prompts=1000),
            # a few hard rows: a small nonzero pass rate (benchmarks/protocol.md, task checks)
            "5-digit": ScratchpadClass(warm_start=300, rl_prompts=1000),
        }
    )
    held_out_per_class: int = 1000
    # The longest well-formed completion: 5 columns x 3 tokens, "#### ", 6 answer digits, <eos> = 23 tokens.
    completion_tokens: int = 24
    # The warm start stops at the first check (every check_every steps) where its greedy accuracy on check_problems
    # problems of the hardest class, drawn as its rows are but in no split, reaches warm_start_target; at most
    # sft_steps steps. A fixed 600 steps left that class anywhere from 0% to 7% sampled across seeds
    # (benchmarks/protocol.md, task checks 4 and 5).
    warm_start_target: float = 0.08
    check_problems: int = 256
    check_every: int = 10
    sft_steps: int = 2000


SCRATCHPAD = ScratchpadTask()


def task_settings(task: str) -> dict:
    """The `DemoSettings` changes ``task`` makes: the scratchpad task's completion length and warm start."""
    if task != "scratchpad":
        return {}
    return dict(
        completion_tokens=SCRATCHPAD.completion_tokens,
        warm_start_target=SCRATCHPAD.warm_start_target,
        sft_steps=SCRATCHPAD.sft_steps,
        sft_check_every=SCRATCHPAD.check_every,
        sft_check_problems=SCRATCHPAD.check_problems,
    )


def scratchpad_completion(a: int, b: int) -> str:
    """Each column's total (carry in included) as two digits, units first, then the GSM8K-style answer.

    >>> scratchpad_completion(47, 85)
    '12 13 #### 132'
    """
    columns, carry = [], 0
    for x, y in zip(str(a).zfill(len(str(b)))[::-1], str(b).zfill(len(str(a)))[::-1]):
        total = int(x) + int(y) + carry
        columns.append(f"{total:02d}")
        carry = total // 10
    return " ".join(columns) + f" #### {a + b}"


def _distinct_pairs(
    digits: int, count: int, rng: random.Random, exclude: frozenset[tuple[int, int]] = frozenset()
) -> list[tuple[int, int]]:
    """``count`` distinct pairs of ``digits``-digit numbers in a seeded order, none of them in ``exclude``."""
    low, high = 10 ** (digits - 1), 10**digits - 1
    if count + len(exclude) > (high - low + 1) ** 2:
        raise ValueError(f"{count} distinct pairs of {digits}-digit numbers asked for; there are fewer")
    seen: dict[tuple[int, int], None] = {}
    while len(seen) < count:
        pair = (rng.randint(low, high), rng.randint(low, high))
        if pair not in exclude:
            seen.setdefault(pair)
    return list(seen)


def _scratchpad_row(a: int, b: int, kind: str) -> dict[str, str]:
    return {"prompt": f"{a}+{b}=", "answer": str(a + b), "completion": scratchpad_completion(a, b), "class": kind}


def scratchpad_splits(
    seed: int, held_out_per_class: int | None = None, task: ScratchpadTask = SCRATCHPAD
) -> TaskSplits:
    """The scratchpad task of ``seed`` (see the module docstring); ``held_out_per_class`` (default the task's).

    Its ``check_rows``, the warm start's target check, are problems of the hardest class that no split holds.
    """
    rng = random.Random(seed)
    n = task.held_out_per_class if held_out_per_class is None else held_out_per_class
    held_out, sft_rows, rl_rows = [], [], []
    for kind, sizes in task.classes.items():
        digits = int(kind.split("-")[0])
        pairs = _distinct_pairs(digits, task.held_out_per_class + sizes.warm_start + sizes.rl_prompts, rng)
        rows = [_scratchpad_row(a, b, kind) for a, b in pairs]
        start = task.held_out_per_class  # the same warm-start and RL rows whatever the held-out size asked for
        held_out += rows[:n]
        sft_rows += rows[start : start + sizes.warm_start]
        rl_rows += rows[start + sizes.warm_start :]
    rng.shuffle(sft_rows)
    rng.shuffle(rl_rows)
    # drawn last, from the hardest class's pairs (the last drawn): the other splits are as without a check set
    check = _distinct_pairs(digits, task.check_problems, rng, exclude=frozenset(pairs))
    return TaskSplits(held_out, sft_rows, rl_rows, [_scratchpad_row(a, b, kind) for a, b in check])


@dataclass(frozen=True)
class TaskSplits:
    """Held-out problems, warm-start rows and RL prompts; every row has ``prompt``, ``answer`` and ``class``.
    ``check_rows``: the warm start's target check where the task has its own (empty: the warm-start rows')."""

    held_out: list[dict[str, str]]
    sft_rows: list[dict[str, str]]
    rl_rows: list[dict[str, str]]
    check_rows: list[dict[str, str]] = field(default_factory=list)

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


def task_splits(task: str, settings: DemoSettings, held_out_per_class: int | None = None) -> TaskSplits:
    """The splits of ``task`` for ``settings.seed`` (``held_out_per_class``: the scratchpad task's, a smaller one for
    a smoke run)."""
    if task == "demo":
        held_out, sft_rows, rl_rows = split_problems(settings)
        label = lambda rows: [{**row, "class": ALL} for row in rows]  # noqa: E731
        return TaskSplits(label(held_out), label(sft_rows), label(rl_rows))
    if task == "mixed":
        return mixed_splits(settings.seed, settings.teacher_noise)
    if task == "scratchpad":
        return scratchpad_splits(settings.seed, held_out_per_class)
    raise ValueError(f"unknown task {task!r}; one of {', '.join(TASKS)}")


def evaluate_by_class(
    model, tokenizer, held_out: list[dict], samples: int, seed: int, verifier, completion_tokens: int = 6
) -> dict:
    """The demo's paired held-out evaluation on each class of ``held_out``, and overall (the mean over classes).

    Returns ``{"overall": {...}, "by_class": {class: {...}}}`` with `evaluation.Evaluation`'s fields; for one class
    ``overall`` is that class's evaluation. ``completion_tokens``: the longest completion generated.
    """
    from dataclasses import asdict

    from trl_dapo_ext.cli.demo import evaluate

    classes = list(dict.fromkeys(row["class"] for row in held_out))
    of = lambda kind: [r for r in held_out if r["class"] == kind]  # noqa: E731
    by_class = {
        kind: asdict(evaluate(model, tokenizer, of(kind), samples, seed, verifier, completion_tokens))
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


def class_shares(classes: list[str], rewards: list[float], lengths: list[int], group_size: int) -> dict:
    """Per class, from groups of ``group_size`` consecutive completions (``classes``: one per group): the pass rate, the
    shares of all-right and all-wrong groups, and the mean completion length in tokens.

    >>> class_shares(["a", "a", "b", "b"], [1, 1, 0, 1, 0, 0, 0, 0], [3, 3, 3, 3, 5, 5, 5, 7], 2)["b"]
    {'groups': 2, 'pass_rate': 0.0, 'all_right': 0.0, 'all_wrong': 1.0, 'zero_variance': 1.0, 'tokens': 5.5}
    """
    found: dict[str, list[tuple[list[float], list[int]]]] = {}
    for index, kind in enumerate(classes):
        span = slice(index * group_size, (index + 1) * group_size)
        found.setdefault(kind, []).append(([float(r == 1.0) for r in rewards[span]], lengths[span]))
    shares = {}
    for kind, groups in found.items():
        right = [sum(g) for g, _ in groups]
        all_right = sum(r == group_size for r in right) / len(groups)
        all_wrong = sum(r == 0 for r in right) / len(groups)
        shares[kind] = dict(
            groups=len(groups),
            pass_rate=sum(right) / (len(groups) * group_size),
            all_right=all_right,
            all_wrong=all_wrong,
            zero_variance=all_right + all_wrong,
            tokens=sum(sum(n) for _, n in groups) / (len(groups) * group_size),
        )
    return shares


def warm_start_groups(
    model, tokenizer, rows: list[dict], group_size: int, seed: int, verifier, completion_tokens: int
) -> dict:
    """GRPO's groups on ``rows`` (RL prompts) from ``model`` as it is: `class_shares` of ``group_size`` completions
    per prompt at temperature 1, overall (the zero-variance share of a batch drawn from ``rows``), and each prompt's
    successes (``successes``, in the order of ``rows``: what `trl-dapo profile`'s estimator reads)."""
    import torch

    from trl_dapo_ext.cli.demo import generate, preserved_rng

    with preserved_rng():
        torch.manual_seed(seed)
        model.eval()
        texts = generate(model, tokenizer, [r["prompt"] for r in rows], True, group_size, completion_tokens)
        model.train()
    rewards = verifier(texts, answer=[r["answer"] for r in rows for _ in range(group_size)])
    # A completion that stopped early ended with <eos>, which decoding drops; one cut off at the limit did not.
    lengths = [
        min(len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 1, completion_tokens) for text in texts
    ]
    by_class = class_shares([r["class"] for r in rows], rewards, lengths, group_size)
    weights = {kind: shares["groups"] / len(rows) for kind, shares in by_class.items()}
    overall = {key: sum(weights[k] * by_class[k][key] for k in by_class) for key in next(iter(by_class.values()))}
    successes = [sum(r == 1.0 for r in rewards[i * group_size : (i + 1) * group_size]) for i in range(len(rows))]
    return dict(
        overall={**overall, "groups": len(rows)}, by_class=by_class, group_size=group_size, successes=successes
    )
