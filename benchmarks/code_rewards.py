"""Benchmark the code-reward sandbox: overhead per sandboxed run and completions/second at 1 and 2 workers.

Usage: ``python benchmarks/code_rewards.py [--isolation auto|namespaces|rlimits] [--n 24] [--repeats 15]``

* overhead: wall time of one sandbox run doing nothing (solution ``pass``, one trivial probe), compared with a bare
  ``python -I -S -c pass`` start on the same machine;
* throughput: ``n`` distinct completions (half correct, half wrong) with 3 tests each, per test format, scored by
  ``make_code_reward(partial_credit=True)`` with ``max_workers`` 1 and 2 (every completion is unique, so the
  de-duplication of identical completions does not flatter the numbers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reward_funcs import make_code_reward  # noqa: E402
from reward_funcs.code.sandbox import Limits, resolve_backend, run_job  # noqa: E402

TESTS = {
    "assert": "assert add(1, 2) == 3\nassert add(-1, 1) == 0\nassert add(10, 5) == 15",
    "stdio": {"inputs": ["1 2\n", "-1 1\n", "10 5\n"], "outputs": ["3\n", "0\n", "15\n"]},
    "call": {"fn_name": "add", "inputs": [[1, 2], [-1, 1], [10, 5]], "outputs": [3, 0, 15]},
}


def completion(fmt: str, i: int) -> str:
    expr = "a + b" if i % 2 == 0 else "abs(a) + b"  # the wrong one passes 2 of the 3 tests
    if fmt == "stdio":
        code = f"# variant {i}\na, b = map(int, input().split())\nprint({expr})\n"
    else:
        code = f"# variant {i}\ndef add(a, b):\n    return {expr}\n"
    return f"Solution:\n```python\n{code}```\n"


def bare_python_ms(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def overhead_ms(backend: str, repeats: int) -> tuple[float, float]:
    job = {"mode": "calls", "code": "pass", "cases": [{"expr": "1"}]}
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        recs = run_job(job, Limits(), backend=backend)
        times.append(time.perf_counter() - t)
        assert recs[0]["o"] == "ok", recs
    return 1000 * statistics.median(times), 1000 * statistics.mean(times)


def throughput(fmt: str, n: int, workers: int, isolation: str) -> float:
    reward = make_code_reward(partial_credit=True, max_workers=workers, isolation=isolation)
    comps = [completion(fmt, i) for i in range(n)]
    t = time.perf_counter()
    out = reward(comps, tests=[TESTS[fmt]] * n)
    dt = time.perf_counter() - t
    assert out == [1.0 if i % 2 == 0 else 2 / 3 for i in range(n)], out
    return n / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isolation", default="auto")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    backend = resolve_backend(args.isolation)
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, backend {backend}")
    print(f"bare `python -I -S -c pass`: {bare_python_ms(args.repeats):.0f} ms (median)")
    med, mean = overhead_ms(backend, args.repeats)
    print(f"sandbox overhead per run (empty solution, 1 probe): median {med:.0f} ms, mean {mean:.0f} ms")
    print(f"throughput, {args.n} distinct completions x 3 tests, partial credit:")
    for fmt in ("assert", "stdio", "call"):
        rates = [throughput(fmt, args.n, w, args.isolation) for w in (1, 2)]
        print(f"  {fmt:6s}  1 worker: {rates[0]:5.1f} completions/s   2 workers: {rates[1]:5.1f} completions/s")


if __name__ == "__main__":
    main()
