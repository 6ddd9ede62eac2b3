"""The demo's task: ``"a+b="`` problems with answers written GSM8K style (``#### 81``), the imperfect teacher the warm
start imitates, and the three disjoint splits (held out, warm start, RL)."""

from __future__ import annotations

import random

from .settings import DemoSettings


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
