"""Adds `label` and `format` to smollm2_completions.jsonl (run after make_smollm2_completions.py; re-runnable).

label: ``right`` when the completion's final answer is the gold, else ``wrong``. A rule proposes it (the last
``\\boxed{}``, else the last number of a finished completion, equals the gold); every completion the rule calls
right, and every one that mentions the gold but is called wrong, was then read by hand, and the verdicts that differ
from the rule are in MANUAL (id -> label, with the reason). A completion cut off by the length limit has no final
answer: wrong, whatever numbers it contains.

format: how the final answer is written: ``boxed`` (\\boxed{}), ``answer-is`` ("the answer is N", "Answer: N"),
``hashes`` (``#### N``), ``equals`` (the last number follows "="), ``prose`` (a number in a sentence), ``none`` (no number), and
``truncated`` for completions cut off by the length limit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

PATH = Path(__file__).with_name("smollm2_completions.jsonl")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")

# id -> (label, format, why the rule is wrong here), from reading the completions.
MANUAL: dict[str, tuple[str, str, str]] = {
    "p01-s1": ("right", "equals", "'leaving 20 - 8 = 12 marbles left', then an unrelated sentence naming 20 and 8"),
    "p32-s3": ("wrong", "prose", "its last number (12) is inside a confused closing sentence that answers nothing"),
    "p39-s1": ("right", "answer-is", "'The answer is that 70 pages is the total ...' (a wrong day count in passing)"),
}


def _number(text: str) -> str:
    return text.replace(",", "").rstrip(".")


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def answer_format(text: str, truncated: bool) -> str:
    if truncated:
        return "truncated"
    if last_boxed(text) is not None:
        return "boxed"
    numbers = list(NUMBER.finditer(text))
    if not numbers:
        return "none"
    before = text[: numbers[-1].start()].rstrip().lower()
    if re.search(r"answer(?: is)?\s*[:=]?\s*[$*(]*$", before):
        return "answer-is"
    if before.endswith("####"):
        return "hashes"
    if before.endswith("="):
        return "equals"
    return "prose"


def rule_label(text: str, gold: str, truncated: bool) -> str:
    if truncated:
        return "wrong"
    boxed = last_boxed(text)
    if boxed is not None:
        return "right" if _number(boxed) == gold else "wrong"
    numbers = NUMBER.findall(text)
    return "right" if numbers and _number(numbers[-1]) == gold else "wrong"


def main() -> None:
    rows = [json.loads(line) for line in PATH.read_text().splitlines()]
    for row in rows:
        row["label"] = rule_label(row["completion"], row["answer"], row["truncated"])
        row["format"] = answer_format(row["completion"], row["truncated"])
        if row["id"] in MANUAL:
            row["label"], row["format"], _ = MANUAL[row["id"]]
    PATH.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print({label: sum(r["label"] == label for r in rows) for label in ("right", "wrong")})


if __name__ == "__main__":
    main()
