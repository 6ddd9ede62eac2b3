"""Writes word_problems.jsonl: 200 one- and two-step arithmetic word problems with integer answers, for
the smollm2_cpu recipe (a 135M instruct model solves a few of them, so groups vary). Deterministic:

    python trl_dapo_ext/recipes/data/word_problems.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jia"]
TEMPLATES = [
    ("{name} has {a} apples and buys {b} more. How many apples does {name} have now?", lambda a, b, c: a + b),
    ("{name} had {a} marbles and gave away {b}. How many marbles are left?", lambda a, b, c: a - b),
    ("A box holds {a} pencils. How many pencils are in {b} boxes?", lambda a, b, c: a * b),
    ("{name} reads {a} pages a day for {b} days. How many pages is that in total?", lambda a, b, c: a * b),
    (
        "There are {a} birds on a tree. {b} fly away and then {c} more arrive. How many birds are on the tree?",
        lambda a, b, c: a - b + c,
    ),
    ("{name} shares {p} cookies equally among {b} friends. How many cookies does each friend get?", None),
]


def problems(count: int = 200, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        template, answer = TEMPLATES[index % len(TEMPLATES)]
        a, b, c = rng.randint(5, 20), rng.randint(2, 9), rng.randint(1, 9)
        name = rng.choice(NAMES)
        if answer is None:  # division with no remainder
            rows.append({"question": template.format(name=name, p=a * b, b=b), "answer": str(a)})
        else:
            rows.append({"question": template.format(name=name, a=a, b=b, c=c), "answer": str(answer(a, b, c))})
    return rows


if __name__ == "__main__":
    out = Path(__file__).with_name("word_problems.jsonl")
    out.write_text("".join(json.dumps(row) + "\n" for row in problems()))
    print(f"wrote {out}")
