"""Throughput and accuracy of `reward_funcs.math_reward` against `trl.rewards.accuracy_reward`, in the same run.

    PYTHONPATH=. python benchmarks/math_rewards.py [--prompts 256] [--group 8] [--seed 0]

Generates GRPO-like batches (prompts x group completions of ~2 KB each: correct answers in several formats and
equivalent forms, wrong answers, near misses, hedges, unanchored mentions, answers hidden in reasoning), with a label
per completion (the verdict our policy calls right, see docs/math-grading.md). Both rewards get the same `solution`
column (gold wrapped in `\\boxed{}`, the form TRL's reward parses best) and the same batches of `batch` completions.
Prints completions per second for both, the ratio, accuracy against the labels, and agreement between the two, for
two corpora of the same size: G completions per gold (GRPO groups: the gold is prepared once per group and repeated
answers are checked once) and one completion per gold (every comparison is new: the worst case for our caches).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from fractions import Fraction

os.environ.setdefault("OMP_NUM_THREADS", "1")


# ----------------------------------------------------------------------------------------------------------------------
# Corpus


MIXES = {
    # GSM8K-heavy training data: mostly integer golds.
    "mixed": {"int": 8, "frac": 3, "surd": 2, "pi": 1, "interval": 1, "tuple": 1, "poly": 1, "dec": 1},
    # MATH-like data where most golds need sympy: the worst case for our string-level shortcuts.
    "symbolic": {"int": 0, "frac": 1, "surd": 3, "pi": 3, "interval": 1, "tuple": 1, "poly": 3, "dec": 0},
}


def _gold(rng: random.Random, mix: dict) -> dict:
    """A gold answer with equivalent forms, a wrong answer and a near miss (all as LaTeX)."""
    kind = rng.choices(list(mix), list(mix.values()))[0]
    if kind == "int":
        n = rng.choice([rng.randint(2, 99), rng.randint(100, 999), rng.randint(1000, 250000)])
        eq = [str(n), f"{n:,}" if n >= 1000 else f"{n}.0", f"\\${n}", f"x = {n}"]
        return dict(kind=kind, gold=str(n), equiv=eq, wrong=str(n + rng.choice([-2, -1, 1, 3, 10])), near=str(n * 100))
    if kind == "dec":
        q = Fraction(rng.randint(1, 999), rng.choice([4, 8, 20, 25, 40]))
        d = f"{float(q):.3f}".rstrip("0").rstrip(".")
        return dict(
            kind=kind,
            gold=d,
            # A trailing zero only after a decimal point: `140` + "0" is 1400, not an equal form.
            equiv=[f"\\frac{{{q.numerator}}}{{{q.denominator}}}", d + "0" if "." in d else f"{d}.0"],
            wrong=f"{float(q) + 0.5:g}",
            near=f"{float(q) + 1e-4:.4f}",
        )
    if kind == "frac":
        p, q = rng.randint(1, 40), rng.randint(3, 41)
        q += q % p == 0
        f = Fraction(p, q)
        gold = f"\\frac{{{f.numerator}}}{{{f.denominator}}}"
        eq = [
            f"\\dfrac{{{f.numerator}}}{{{f.denominator}}}",
            f"\\frac{{{2 * f.numerator}}}{{{2 * f.denominator}}}",
            f"{f.numerator}/{f.denominator}",
        ]
        near = f"{float(f):.4f}"
        if Fraction(near) == f:  # a terminating decimal is not a near miss: nudge it
            near = f"{float(f) + 1e-4:.4f}"
        return dict(kind=kind, gold=gold, equiv=eq, wrong=f"\\frac{{{f.denominator}}}{{{f.numerator + 1}}}", near=near)
    if kind == "surd":
        a, b = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7])
        return dict(
            kind=kind,
            gold=f"{a}\\sqrt{{{b}}}",
            equiv=[f"\\sqrt{{{a * a * b}}}", f"{a}\\sqrt {b}"],
            wrong=f"{a}\\sqrt{{{b + 1}}}",
            near=f"{a * b**0.5:.4f}",
        )
    if kind == "pi":
        k, m = rng.randint(1, 7), rng.choice([2, 3, 4, 6])
        return dict(
            kind=kind,
            gold=f"\\frac{{{k}\\pi}}{{{m}}}",
            equiv=[f"\\frac{{{k}}}{{{m}}}\\pi", f"{k}\\pi/{m}"],
            wrong=f"\\frac{{{k + 1}\\pi}}{{{m}}}",
            near=f"{k * 3.14159 / m:.4f}",
        )
    if kind == "interval":
        a, b = sorted(rng.sample(range(-20, 20), 2))
        return dict(
            kind=kind, gold=f"({a}, {b}]", equiv=[f"\\left({a},{b}\\right]"], wrong=f"[{a}, {b}]", near=f"({a}, {b})"
        )
    if kind == "tuple":
        a, b = rng.sample(range(-20, 20), 2)
        return dict(
            kind=kind,
            gold=f"({a}, {b})",
            equiv=[f"({a},{b})", f"\\left( {a}, {b} \\right)"],
            wrong=f"({b}, {a})",
            near=f"({a}, {b + 1})",
        )
    a, b = rng.randint(2, 9), rng.randint(1, 9)
    return dict(
        kind="poly",
        gold=f"x^2+{a}x+{b}",
        equiv=[f"{a}x+x^2+{b}", f"x^{{2}} + {a} x + {b}"],
        wrong=f"x^2+{a}x-{b}",
        near=f"x^2+{a + 1}x+{b}",
    )


_WORDS = (
    "we compute the value step by step and check each intermediate result carefully so that nothing is "
    "missed then we simplify the expression and compare with the constraints given"
).split()


def _reasoning(rng: random.Random, gold: str, size: int = 1800) -> str:
    """~size characters of plausible reasoning that mentions numbers (and sometimes the gold) without any anchor."""
    out, n = [], 0
    while n < size:
        s = " ".join(rng.choices(_WORDS, k=rng.randint(8, 16))).capitalize()
        s += rng.choice(
            [
                f" so {rng.randint(2, 60)} + {rng.randint(2, 60)} = {rng.randint(4, 120)}.",
                f" giving ${rng.randint(1, 9)}\\cdot {rng.randint(1, 9)}$.",
                ".",
                f" ({gold} is plausible).",
            ]
        )
        out.append(s)
        n += len(s) + 1
    return " ".join(out)


def _completion(rng: random.Random, g: dict, category: str) -> tuple[str, float]:
    r = _reasoning(rng, g["gold"])
    gold, wrong = g["gold"], g["wrong"]
    eq = rng.choice(g["equiv"])
    match category:
        case "correct_boxed":
            return f"{r}\nTherefore the answer is $\\boxed{{{gold}}}$.", 1.0
        case "correct_equiv":
            return f"{r}\nSo we get $\\boxed{{{eq}}}$.", 1.0
        case "correct_phrase":
            return f"{r}\nThe final answer is ${gold}$. I hope it is correct.", 1.0
        case "correct_answer_line":
            return f"{r}\n**Answer:** ${eq}$", 1.0
        case "correct_tag":
            return f"<think>{r}</think>\n<answer>{gold}</answer>", 1.0
        case "correct_think":
            return f"<think>{r} Maybe $\\boxed{{{wrong}}}$?</think>\nThe answer is $\\boxed{{{gold}}}$.", 1.0
        case "self_correction":
            return (
                f"{r}\nSo $\\boxed{{{wrong}}}$. Wait, I made an arithmetic error. Redoing it: $\\boxed{{{gold}}}$.",
                1.0,
            )
        case "wrong_boxed":
            return f"{r}\nTherefore the answer is $\\boxed{{{wrong}}}$.", 0.0
        case "near_miss":
            return f"{r}\nTherefore the answer is $\\boxed{{{g['near']}}}$.", 0.0
        case "hedge":
            form = rng.choice(
                [
                    f"$\\boxed{{{gold}}}$ or $\\boxed{{{wrong}}}$",
                    f"$\\boxed{{{wrong}}}$ or $\\boxed{{{gold}}}$",
                    f"$\\boxed{{{wrong} \\text{{ or }} {gold}}}$",
                    f"$\\boxed{{{wrong}}} \\quad \\text{{or}} \\quad \\boxed{{{gold}}}$",
                    f"$\\boxed{{{wrong}}} \\text{{ for part (a) and }} \\boxed{{{gold}}}$",
                ]
            )
            lead = rng.choice(["The answer is", "So we get"])  # with and without an answer phrase around the boxes
            return f"{r}\n{lead} {form}.", 0.0
        case "unanchored":
            return f"{r}\nWe conclude with {gold}, which fits all the constraints.", 0.0
        case "unclosed_think":
            return f"<think>{r}\nSo the answer is $\\boxed{{{gold}}}$", 0.0
        case "self_correction_away":
            return f"{r}\nSo $\\boxed{{{gold}}}$. Wait, that is wrong. Redoing it: $\\boxed{{{wrong}}}$.", 0.0
    raise ValueError(category)


CATEGORIES = {
    "correct_boxed": 5, "correct_equiv": 3, "correct_phrase": 1, "correct_answer_line": 1, "correct_tag": 1,
    "correct_think": 1, "self_correction": 1, "wrong_boxed": 5, "near_miss": 2, "hedge": 2, "unanchored": 1,
    "unclosed_think": 1, "self_correction_away": 1,
}  # fmt: skip


def build_corpus(n_prompts: int, group: int, seed: int, mix: str = "mixed") -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n_prompts):
        g = _gold(rng, MIXES[mix])
        for _ in range(group):
            cat = rng.choices(list(CATEGORIES), list(CATEGORIES.values()))[0]
            text, label = _completion(rng, g, cat)
            rows.append(
                dict(
                    completion=[{"role": "assistant", "content": text}],
                    solution=f"$\\boxed{{{g['gold']}}}$",
                    label=label,
                    category=cat,
                    kind=g["kind"],
                )
            )
    return rows


# ----------------------------------------------------------------------------------------------------------------------
# Runs


def _worker_cpu() -> dict[int, float]:
    """CPU seconds used so far by each live verifier worker process of this process."""
    import psutil

    from reward_funcs.math import verdicts as mv

    out = {}
    for pool in list(mv._POOLS.values()):
        for pid in pool.all_pids():
            try:
                t = psutil.Process(pid).cpu_times()
                out[pid] = t.user + t.system
            except psutil.Error:
                pass
    return out


def _wait_until_workers_idle(max_s: float = 120.0) -> None:
    """Wait until no verifier worker uses CPU any more (the warm spare starts after the first batch): its one-time
    start-up is not a per-completion cost and must not land in the measured run."""
    deadline = time.monotonic() + max_s
    before = _worker_cpu()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _worker_cpu()
        if now.keys() == before.keys() and sum(now.values()) - sum(before.values()) < 0.02:
            return
        before = now


def run(fn, rows: list[dict], batch: int) -> tuple[list, float, float]:
    """(rewards, wall seconds, CPU seconds of this process and of the verifier workers it uses)."""
    out = []
    workers_before = _worker_cpu()
    cpu_start = time.process_time()
    start = time.perf_counter()
    for i in range(0, len(rows), batch):
        chunk = rows[i : i + batch]
        out.extend(fn([r["completion"] for r in chunk], solution=[r["solution"] for r in chunk]))
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    cpu += sum(t - workers_before.get(pid, 0.0) for pid, t in _worker_cpu().items())
    return out, wall, cpu


def _reset_caches() -> None:
    from reward_funcs import close_math_workers
    from reward_funcs.math import compare as mc
    from reward_funcs.math import verdicts as mv

    close_math_workers()
    for cache in (mc._prepare, mc._prepare_gold, mc._exact, mc._structure, mc._sides):
        cache.cache_clear()
    mv._VERDICTS.data.clear()
    mv._GOLD_STATUS.data.clear()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64, help="completions per reward call (a GRPO generation batch)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--mix", choices=sorted(MIXES), default="mixed", help="gold kinds: mixed (GSM8K-heavy) or symbolic"
    )
    args = ap.parse_args(argv)

    import logging

    from trl.rewards import accuracy_reward

    from reward_funcs import close_math_workers, math_reward

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    corpora = [
        (f"G={args.group} completions per gold", build_corpus(args.prompts, args.group, args.seed, args.mix)),
        ("G=1 completion per gold", build_corpus(args.prompts * args.group, 1, args.seed, args.mix)),
    ]
    summary = []
    for label, rows in corpora:
        print(f"\n===== {label} =====")
        summary.append((label, _measure(rows, args, math_reward, accuracy_reward, close_math_workers)))
    print("\nours/trl, median of paired runs, same corpus size, same run:  wall-clock throughput | CPU time")
    for label, (ratio, cpu_ratio) in summary:
        print(f"  {label:28s} {ratio:8.2f}x | {cpu_ratio:.2f}x")


def _measure(rows: list[dict], args, math_reward, accuracy_reward, close_math_workers) -> tuple[float, float]:
    """Print throughput and accuracy of both rewards on `rows`; return the median throughput and CPU-time ratios."""
    n = len(rows)
    print(
        f"corpus ({args.mix}): {n} completions ({len({r['solution'] for r in rows})} distinct golds), mean {sum(len(r['completion'][0]['content']) for r in rows) / n:.0f} chars, "
        f"{sum(r['label'] for r in rows):.0f} labelled correct; cores available: {len(os.sched_getaffinity(0))}"
    )

    # Alternate the two (the machine may be shared: alternating spreads background load over both), and start every
    # repeat of ours from cold caches and fresh workers so no verdict is reused across repeats.
    t_ours_all, t_trl_all, startups, cpu_ours_all, cpu_trl_all = [], [], [], [], []
    for _ in range(args.repeats):
        _reset_caches()
        start = time.perf_counter()
        math_reward(["\\boxed{\\sqrt{4}}"], answer=["2"])  # start the workers (reported, not timed below)
        startups.append(time.perf_counter() - start)
        math_reward(["\\boxed{\\sqrt{9}}"], answer=["3"])  # a second batch starts the warm spare
        _wait_until_workers_idle()
        ours, t, cpu = run(math_reward, rows, args.batch)
        t_ours_all.append(t)
        cpu_ours_all.append(cpu)
        close_math_workers()
        trl, t, cpu = run(accuracy_reward, rows, args.batch)
        t_trl_all.append(t)
        cpu_trl_all.append(cpu)
    t_ours, t_trl, startup = statistics.median(t_ours_all), statistics.median(t_trl_all), statistics.median(startups)

    def score(out):
        return [None if v is None else float(v) for v in out]

    ours, trl = score(ours), score(trl)
    labels = [r["label"] for r in rows]
    ok_ours = [o == lab for o, lab in zip(ours, labels, strict=True)]
    ok_trl = [o == lab for o, lab in zip(trl, labels, strict=True)]
    both_right = sum(a and b for a, b in zip(ok_ours, ok_trl, strict=True))
    print(f"\nmedian of {args.repeats} alternated runs, batches of {args.batch}:")
    print(
        f"math_reward (ours):  {n / t_ours:9.1f} completions/s  (runs: {', '.join(f'{n / t:.0f}' for t in t_ours_all)}; "
        f"worker start-up {startup:.2f} s, not included)"
    )
    print(
        f"trl accuracy_reward: {n / t_trl:9.1f} completions/s  (runs: {', '.join(f'{n / t:.0f}' for t in t_trl_all)})"
    )
    ratios = [b / a for a, b in zip(t_ours_all, t_trl_all, strict=True)]
    ratio = statistics.median(ratios)
    cpu_ratio = statistics.median(b / a for a, b in zip(cpu_ours_all, cpu_trl_all, strict=True))
    print(
        f"throughput ratio ours/trl: {statistics.median(ratios):.2f}x (median of paired runs: "
        f"{', '.join(f'{r:.2f}' for r in ratios)})"
    )
    # Wall time favours us on a loaded machine (our worker processes get more of the contended cores); CPU time
    # per completion (ours: this process plus its workers) does not depend on the load.
    print(
        f"CPU seconds per 1000 completions: ours {1000 * statistics.median(cpu_ours_all) / n:.2f}, "
        f"trl {1000 * statistics.median(cpu_trl_all) / n:.2f}; CPU-time ratio trl/ours {cpu_ratio:.2f}x"
    )
    print(
        f"\naccuracy vs labels: ours {sum(ok_ours) / n:.4f} ({sum(ok_ours)}/{n}), trl {sum(ok_trl) / n:.4f} ({sum(ok_trl)}/{n})"
    )
    print(f"agreement ours==trl: {sum(a == b for a, b in zip(ours, trl, strict=True)) / n:.4f}")
    print(
        f"both right: {both_right}; trl right but ours wrong: {sum(b and not a for a, b in zip(ok_ours, ok_trl, strict=True))}; "
        f"ours right but trl wrong: {sum(a and not b for a, b in zip(ok_ours, ok_trl, strict=True))}"
    )
    for name, out in (("ours", ours), ("trl", trl)):
        fp = sum(o == 1.0 and lab == 0.0 for o, lab in zip(out, labels, strict=True))
        fn = sum(o != 1.0 and lab == 1.0 for o, lab in zip(out, labels, strict=True))
        print(f"{name:5s} false positives {fp:4d}, false negatives {fn:4d}, None {sum(o is None for o in out)}")

    per_cat = defaultdict(lambda: [0, 0, 0])
    for r, a, b in zip(rows, ok_ours, ok_trl, strict=True):
        c = per_cat[r["category"]]
        c[0] += 1
        c[1] += a
        c[2] += b
    print(f"\n{'category':22s} {'n':>5s} {'ours ok':>8s} {'trl ok':>8s}")
    for cat in CATEGORIES:
        c = per_cat[cat]
        print(f"{cat:22s} {c[0]:5d} {c[1]:8d} {c[2]:8d}")
    wrong_ours = Counter((r["category"], r["kind"]) for r, a in zip(rows, ok_ours, strict=True) if not a)
    if wrong_ours:
        print("\nours wrong by (category, gold kind):", dict(wrong_ours))
    return ratio, cpu_ratio


if __name__ == "__main__":
    sys.exit(main())
