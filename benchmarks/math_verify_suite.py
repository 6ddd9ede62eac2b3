"""Agreement of `math_reward`, TRL's `accuracy_reward` and Math-Verify with Math-Verify's own graded test pairs.

    PYTHONPATH=. python benchmarks/math_verify_suite.py [--suite PATH] [--show-misses] [--json OUT]

The suite is the set of (gold, prediction, expected verdict) pairs in the regression tests that ship in Math-Verify's
source distribution on PyPI (`tests/test_all.py`, `test_numina_cases.py`, `test_open_thoughts.py`,
`test_yujianll.py`: 270 pairs in math-verify 0.9.0, collected from real model outputs according to its own test
docstring). Nothing of it is copied into this repository: `--suite` takes the unpacked sdist (or its `.tar.gz`);
without it the script fetches the sdist of the installed version with `pip download --no-binary :all:`.

Protocol. Most of the suite's predictions are bare LaTeX (`$\\frac{1}{2}$`) or prose; `math_reward` grades only
anchored answers (docs/math-grading.md). A prediction without an anchor (`\\boxed`, `####`, `Answer:`, "the answer
is") that is one formula, prose around one formula, or an expression of at most one word (`28 percent`) gets that
formula boxed in place, the form a trained model writes; prose with several formulas is left as it is (nothing says
which formula is the answer). TRL's reward gets the same completion and the gold as its `solution`; Math-Verify runs
each pair as the suite's own test does, so it agrees with itself by construction.

Each row prints agreement with the suite's verdicts, recall (expected-equal pairs rewarded), false positives and
negatives, None (gold skipped), and how many of the disagreements follow a documented rule of this project
(`POLICY`, `policy_reason`): no number scraped from prose, no decimal approximations, commas are no decimal points,
every side of an equation must equal the gold, and a few verdicts of the suite itself (`1 - 1/e` vs `1 + 1/e`
expected equal; one pair graded both 0 and 1 depending on `allow_set_relation_comp`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

SUITE_FILES = ("test_all.py", "test_numina_cases.py", "test_open_thoughts.py", "test_yujianll.py")
_ANCHOR = re.compile(r"(?im)\\boxed|\\fbox|####|^\s*(?:final\s+)?answer\s*:|\bthe\s+(?:final\s+)?answer\s+is\b")
# Inline math (`$...$`, `\\(...\\)`) stays on one line, display math may span lines (the suite's own rule).
# An escaped `\\$` (a dollar sign) neither opens nor closes math.
_ENV = re.compile(r"\$\$([\s\S]+?)\$\$|(?<!\\)\$((?:\\\$|[^$\n])+?)(?<!\\)\$|\\\[([\s\S]+?)\\\]|\\\(([^\n]+?)\\\)")
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_OUTER = re.compile(r"^\s*(?:\$\$|\$|\\\[|\\\()(.*?)(?:\$\$|\$|\\\]|\\\))\s*[.]?\s*$", re.S)

# Pairs where this project's documented policy (docs/math-grading.md) contradicts the suite's verdict on purpose, as
# (FN or FP, test, text in the gold, text in the prediction, rule). Each rule refuses a false positive or a hack.
POLICY = (
    ("FN", "test_complex_math_expressions", "", "0.0833333", "no decimal approximation of an exact value"),
    ("FN", "test_complex_math_expressions", "", "0.33\\\\0.2", "no decimal approximation of an exact value"),
    ("FN", "test_complex_math_expressions", "", "2.6667", "no decimal approximation of an exact value"),
    ("FN", "test_float_precision", "4.1231056", "", "no decimal approximation of an exact value"),
    ("FN", "test_math_extraction_additional_cases", "(1,3)", "{1,3}", "a list is not an ordered pair"),
    ("FN", "test_number_extraction", "", "1000,99", "a comma separates values (or thousands), it is no decimal point"),
    ("FN", "test_number_extraction", "1,22", "", "a comma separates values (or thousands), it is no decimal point"),
    ("FN", "test_number_extraction", "0,111", "", "a comma separates values (or thousands), it is no decimal point"),
    ("FN", "test_relations_math", "x = ", "5+5+1 =", "every side of an equation must equal the gold (hedge guard)"),
    ("FN", "test_relations_math", "\\zzz", "", "a gold equation whose sides differ"),
    ("FN", "test_latex_notation", "10/9", "\\$ =", "every side of an equation must equal the gold (hedge guard)"),
    ("FN", "test_numina_cases", "\\\\boxed{W(n)", "", "the gold's box is never closed: unparseable, skipped"),
    ("FN", "test_open_thoughts", "no no no", "", "a gold whose boxes are split by words: ambiguous, skipped"),
    ("FN", "test_string_extraction", "1 - \\frac{1}{\\mathrm{e}}", "1 +", "a different value (the suite's verdict)"),
    # The suite grades this pair 0 under its default allow_set_relation_comp=False and 1 with it on: a solved
    # inequality equals its interval here (a copy of the prompt's inequality is refused instead).
    ("FP", "test_set_rel_assymetry", "x \\in [-2,7]", "\\\\le x", "a solved inequality equals its interval"),
)


def policy_reason(case: dict, kind: str = "FN") -> str | None:
    """The documented rule behind a disagreement with the suite (a false negative, or with kind="FP" a false
    positive), or None."""
    if kind == "FN" and case["answer"] is None:
        return "no anchored answer: no number is scraped from prose"
    if kind == "FN" and len(_WORD.findall(case["answer"])) >= 2:
        return "the anchored answer is a sentence: no number is scraped from it"
    gold, pred = case["args"]["gold"], case["args"]["pred"]
    for rule_kind, test, in_gold, in_pred, rule in POLICY:
        if rule_kind == kind and case["test"] == test and in_gold in gold and in_pred in pred:
            return rule
    return None


def _fetch_sdist(dest: Path) -> Path:
    from importlib.metadata import version

    spec = f"math-verify=={version('math-verify')}"
    cmd = [sys.executable, "-m", "pip", "download", spec, "--no-binary", ":all:", "--no-deps", "-d", str(dest)]
    subprocess.run(cmd, check=True, capture_output=True)
    return next(dest.glob("math_verify-*.tar.gz"))


def _suite_root(path: str | None, tmp: Path) -> Path:
    p = Path(path) if path else _fetch_sdist(tmp)
    if p.is_file():
        with tarfile.open(p) as tar:
            tar.extractall(tmp, filter="data")
        p = next(tmp.glob("math_verify-*/"))
    return p


def _load_tests(root: Path) -> list[dict]:
    """Every parametrized case of the suite files: test name, function, and its arguments by name."""
    # The suite's files import `compare_strings` from `tests.test_all`: load that module under that name.
    sys.modules.setdefault("tests", types.ModuleType("tests"))
    cases = []
    for name in SUITE_FILES:
        spec = importlib.util.spec_from_file_location(f"tests.{name[:-3]}", root / "tests" / name)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        for attr in dir(mod):
            fn = getattr(mod, attr)
            if not attr.startswith("test_") or not callable(fn):
                continue
            for mark in getattr(fn, "pytestmark", []):
                if mark.name != "parametrize":
                    continue
                names = [n.strip() for n in mark.args[0].split(",")]
                for values in mark.args[1]:
                    args = dict(zip(names, values, strict=True))
                    expected = int(args.get("expected", args.get("result")))
                    cases.append(dict(file=name, test=attr, fn=fn, args=args, expected=expected))
    return cases


def completion_for(pred: str) -> str:
    """The suite's prediction as an anchored completion: unchanged when it has an anchor, else its one math
    environment boxed in place (the whole text when it has none and no words; unchanged with several)."""
    if _ANCHOR.search(pred):
        return pred
    m = _OUTER.match(pred)
    if m and "$" not in m.group(1):
        return f"$\\boxed{{{m.group(1).strip()}}}$"
    envs = list(_ENV.finditer(pred))
    if len(envs) == 1:  # prose around one formula: that formula is the answer (with several, nothing says which)
        e = envs[0]
        inner = next(g for g in e.groups() if g is not None)
        return f"{pred[: e.start()]}$\\boxed{{{inner.strip()}}}${pred[e.end() :]}"
    if len(_WORD.findall(pred)) <= 1 and "$" not in pred:  # an expression (`28 percent`), not prose
        return f"$\\boxed{{{pred.strip()}}}$"
    return pred


def _math_verify_verdict(case: dict) -> int:
    try:
        case["fn"](**case["args"])
        return case["expected"]
    except AssertionError:
        return 1 - case["expected"]
    except Exception:
        return 0


def score(cases: list[dict]) -> dict[str, list]:
    from trl.rewards import accuracy_reward

    from reward_funcs import math_reward

    completions = [completion_for(c["args"]["pred"]) for c in cases]
    golds = [c["args"]["gold"] for c in cases]
    out: dict[str, list] = {}
    times: dict[str, float] = {}
    start = time.perf_counter()
    out["math_reward"] = math_reward(completions, answer=golds)
    times["math_reward"] = time.perf_counter() - start
    start = time.perf_counter()
    out["trl accuracy_reward"] = [
        accuracy_reward([[{"role": "assistant", "content": c}]], solution=[g])[0]
        for c, g in zip(completions, golds, strict=True)
    ]
    times["trl accuracy_reward"] = time.perf_counter() - start
    start = time.perf_counter()
    out["math-verify (suite's own test)"] = [_math_verify_verdict(c) for c in cases]
    times["math-verify (suite's own test)"] = time.perf_counter() - start
    out["_times"] = times
    out["_completions"] = completions
    return out


def _verdicts(got: list) -> list:
    return [None if g is None else int(float(g) >= 1.0) for g in got]


def report(cases: list[dict], scores: dict[str, list], show_misses: bool) -> dict:
    """Print agreement, false positives / negatives (and how many of them follow a documented rule) per checker."""
    from reward_funcs import extract_final_answer

    n = len(cases)
    expected = [c["expected"] for c in cases]
    for c, text in zip(cases, scores["_completions"], strict=True):
        c["answer"] = extract_final_answer(text)
    print(f"suite: {n} graded pairs ({sum(expected)} expected equal, {n - sum(expected)} expected different)\n")
    print(f"{'checker':32s} {'agree':>6s} {'recall':>6s} {'FP':>3s} {'FN':>3s} {'None':>4s}  by policy: FP FN")
    summary = {}
    for name, got in scores.items():
        if name.startswith("_"):
            continue
        v = _verdicts(got)
        fp = [c for c, x, e in zip(cases, v, expected, strict=True) if x == 1 and e == 0]
        fn = [c for c, x, e in zip(cases, v, expected, strict=True) if x != 1 and e == 1]
        row = dict(
            agreement=sum(x == e for x, e in zip(v, expected, strict=True)) / n,
            recall=1 - len(fn) / sum(expected),
            false_positives=len(fp),
            false_negatives=len(fn),
            none=sum(x is None for x in v),
            policy_fp=sum(policy_reason(c, "FP") is not None for c in fp),
            policy_fn=sum(policy_reason(c) is not None for c in fn),
        )
        summary[name] = row
        print(
            f"{name:32s} {row['agreement']:6.3f} {row['recall']:6.3f} {len(fp):3d} {len(fn):3d} {row['none']:4d}"
            f"  {row['policy_fp']:13d} {row['policy_fn']:2d}"
        )
        if show_misses and name == "math_reward":
            _print_misses(cases, scores["_completions"], fp, fn)
            trl = _verdicts(scores["trl accuracy_reward"])
            only_trl = [(c, x) for c, x, t in zip(cases, v, trl, strict=True) if t == c["expected"] != x]
            print(
                f"   TRL right where math_reward is not: {len(only_trl)}, all by policy: "
                f"{all(policy_reason(c, 'FP' if x == 1 else 'FN') for c, x in only_trl)}"
            )
    times = scores["_times"]
    print("\nseconds for the whole suite, one pass: " + ", ".join(f"{k} {t:.1f}" for k, t in times.items()))
    return summary


def _print_misses(cases, completions, fp, fn) -> None:
    for label, kind, rows in (("false positive", "FP", fp), ("false negative", "FN", fn)):
        for c in rows:
            text = completions[cases.index(c)]
            why = policy_reason(c, kind) or "NOT BY POLICY"
            print(f"   {label}: {c['test']}: gold {c['args']['gold'][-120:]!r} completion {text[-160:]!r}: {why}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", help="unpacked math-verify sdist or its .tar.gz (default: pip download it)")
    ap.add_argument("--show-misses", action="store_true", help="print every pair math_reward gets wrong")
    ap.add_argument("--json", help="write the summary as JSON to this path")
    args = ap.parse_args(argv)
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        cases = _load_tests(_suite_root(args.suite, Path(tmp)))
    scores = score(cases)
    summary = report(cases, scores, args.show_misses)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    from reward_funcs import close_math_workers

    close_math_workers()


if __name__ == "__main__":
    sys.exit(main())
