"""Agreement of `math_reward`, TRL's `accuracy_reward` and Math-Verify with Math-Verify's own graded test pairs.

    PYTHONPATH=. python benchmarks/math_verify_suite.py [--suite PATH] [--show-misses] [--json OUT]

The suite is the set of (gold, prediction, expected verdict) pairs in the regression tests that ship in Math-Verify's
source distribution on PyPI (`tests/test_all.py`, `test_numina_cases.py`, `test_open_thoughts.py`,
`test_yujianll.py`: 270 pairs in math-verify 0.9.0, collected from real model outputs according to its own test
docstring). Nothing of it is copied into this repository: `--suite` takes the unpacked sdist (or its `.tar.gz`);
without it the script fetches the sdist of the installed version with `pip download --no-binary :all:`.

Protocol. The suite's predictions are bare LaTeX (`$\\frac{1}{2}$`); `math_reward` grades only anchored answers (see
docs/math-grading.md), so a prediction without an anchor (`\\boxed`, `####`, `Answer:`, "the answer is") is given
as `$\\boxed{...}$` around its text with the outer math delimiters removed, the form a trained model writes. TRL's
reward gets the same completion and the gold as its `solution`; Math-Verify runs each pair as the suite's own test
does. The suite's verdicts are Math-Verify's, including a few this project disagrees with on purpose (for example
`1 - 1/e` vs `1 + 1/e` expected equal, or a predicted interval for a gold inequality under
`allow_set_relation_comp=True`): they are listed under "disagreements by policy" and never counted as our bugs.
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
_ENV = re.compile(r"\$\$([\s\S]+?)\$\$|\$([^$\n]+?)\$|\\\[([\s\S]+?)\\\]|\\\(([^\n]+?)\\\)")
_WORD = re.compile(r"[A-Za-z]{3,}")
_OUTER = re.compile(r"^\s*(?:\$\$|\$|\\\[|\\\()(.*?)(?:\$\$|\$|\\\]|\\\))\s*[.]?\s*$", re.S)

# Pairs whose expected verdict this project's policy contradicts on purpose (see docs/math-grading.md), by
# (test, gold, prediction). Each is a refusal that protects against a false positive or a hack.
POLICY = {
    ("test_string_extraction", "$1 - \\frac{1}{\\mathrm{e}}$", "$1 + \\frac{1}{\\mathrm{e}}$"): "a different value",
}


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
    """The suite's prediction as an anchored completion: unchanged when it has an anchor, else its last math
    environment boxed in place (the whole text when it has none and no words)."""
    if _ANCHOR.search(pred):
        return pred
    m = _OUTER.match(pred)
    if m and "$" not in m.group(1):
        return f"$\\boxed{{{m.group(1).strip()}}}$"
    envs = list(_ENV.finditer(pred))
    if envs:
        e = envs[-1]
        inner = next(g for g in e.groups() if g is not None)
        return f"{pred[: e.start()]}$\\boxed{{{inner.strip()}}}${pred[e.end() :]}"
    if not _WORD.search(pred):
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


def _key(c: dict) -> tuple:
    return (c["test"], c["args"]["gold"], c["args"]["pred"])


def report(cases: list[dict], scores: dict[str, list], show_misses: bool) -> dict:
    n = len(cases)
    expected = [c["expected"] for c in cases]
    summary = {}
    print(f"suite: {n} graded pairs ({sum(expected)} expected equal, {n - sum(expected)} expected different)\n")
    print(f"{'checker':32s} {'agree':>7s} {'FP':>4s} {'FN':>4s} {'None':>5s} {'FN by policy':>13s}")
    from reward_funcs import extract_final_answer

    for c, text in zip(cases, scores["_completions"], strict=True):
        c["anchored"] = extract_final_answer(text) is not None
    for name, got in scores.items():
        if name.startswith("_"):
            continue
        verdicts = [None if g is None else int(float(g) >= 1.0) for g in got]
        agree = sum(v == e for v, e in zip(verdicts, expected, strict=True))
        fp = [c for c, v, e in zip(cases, verdicts, expected, strict=True) if v == 1 and e == 0]
        fn = [c for c, v, e in zip(cases, verdicts, expected, strict=True) if v != 1 and e == 1]
        policy = [c for c in fn if _key(c) in POLICY or not c["anchored"]]
        nones = sum(v is None for v in verdicts)
        print(f"{name:32s} {agree / n:7.3f} {len(fp):4d} {len(fn):4d} {nones:5d} {len(policy):13d}")
        summary[name] = dict(agreement=agree / n, false_positives=len(fp), false_negatives=len(fn), none=nones)
        if show_misses and name == "math_reward":
            for label, rows in (("false positives", fp), ("false negatives", fn)):
                for c in rows:
                    why = POLICY.get(_key(c), "" if c["anchored"] else "(no anchored answer)")
                    text = scores["_completions"][cases.index(c)]
                    print(f"   {label[:-1]}: {c['test']}: gold {c['args']['gold']!r} completion {text[-300:]!r} {why}")
    times = scores["_times"]
    print(
        "\nseconds for the whole suite (one pass, cold caches): " + ", ".join(f"{k} {v:.1f}" for k, v in times.items())
    )
    return summary


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
