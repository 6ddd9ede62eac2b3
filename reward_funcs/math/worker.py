"""Symbolic comparison worker: runs in its own process, started and killed by `reward_funcs.math.pool`.

Protocol (JSON lines on stdin, short text lines on stdout):
  request  {"g": gold, "p": [[key, pred], ...], "t": timeout_s}
  replies  "R" once when imports are done, then per request "G 1" (gold parsed) or "G 0" (gold unparseable),
           followed, when the gold parsed, by one "V <index> <T|F|E>" per pred (E: gave up on its own timer).
  request  {"stats": 1} -> "S <gold parses> <pred checks>" (used by tests to prove the gold is parsed once).

The parent owns the hard wall-clock limit (it SIGKILLs this process); the signal-based timeouts here are only a cheaper
first guard, which works because this process runs the comparison in its main thread. Only math-verify/sympy parse
model text here; nothing is ever `eval`ed or `exec`ed.

This module imports nothing from the rest of `reward_funcs`, so the worker stays small and its start-up fast.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import threading
import time
from collections import OrderedDict

# Decimal literals become exact fractions before sympy sees them: math-verify turns `0.1` into a 53-bit Float, which
# makes exact comparison impossible and lets `0.333333` pass for 1/3 under its 6-digit rounding.
_DECIMAL = re.compile(r"(?<![\w.])(\d*)\.(\d+)(?![\d.])")
_GOLD_CACHE_SIZE = 4096


class _GuardTimeout(Exception):
    pass


def _rationalize(s: str) -> str:
    def repl(m: re.Match) -> str:
        whole, frac = m.group(1) or "0", m.group(2)
        zeros = "0" * len(frac)
        return f"\\frac{{{whole}{frac}}}{{1{zeros}}}"

    return _DECIMAL.sub(repl, s)


class _Comparator:
    def __init__(self) -> None:
        import sympy
        from latex2sympy2_extended import NormalizationConfig
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

        self.sympy = sympy
        self.parse = parse
        self.verify = verify
        self.latex_cfg = [
            LatexExtractionConfig(
                boxed_match_priority=0,
                try_extract_without_anchor=False,
                normalization_config=NormalizationConfig(
                    basic_latex=True, units=True, malformed_operators=False, nits=False, boxed="all", equations=False
                ),
            )
        ]
        self.expr_cfg = [ExprExtractionConfig()]
        self.gold_cache: OrderedDict[str, list] = OrderedDict()
        self.gold_parses = 0
        self.pred_checks = 0

    def _parse(self, s: str, timeout: int) -> list:
        text = _rationalize(s)
        out = self.parse("\\boxed{" + text + "}", extraction_config=self.latex_cfg, parsing_timeout=timeout)
        return [x for x in out if not isinstance(x, str)] + [x for x in out if isinstance(x, str)]

    def gold(self, g: str, timeout: int) -> list:
        hit = self.gold_cache.get(g)
        if hit is not None:
            self.gold_cache.move_to_end(g)
            return hit
        self.gold_parses += 1
        parsed = self._parse(g, timeout)
        # Only a sympy object counts as a parsed gold; a bare string means math-verify gave up on it.
        if not any(not isinstance(x, str) for x in parsed):
            parsed = []
        self.gold_cache[g] = parsed
        if len(self.gold_cache) > _GOLD_CACHE_SIZE:
            self.gold_cache.popitem(last=False)
        return parsed

    def match(self, gold: list, p: str, timeout: int, guard_s: float) -> str:
        self.pred_checks += 1
        pred = self._parse(p, timeout)
        if not pred:
            return "F"
        for g in gold:
            for t in pred:
                if isinstance(g, str) != isinstance(t, str):
                    continue
                if isinstance(g, str):
                    if g.replace(" ", "") == t.replace(" ", ""):
                        return "T"
                    continue
                if self._degenerate(g) or self._degenerate(t):
                    continue  # `1:00` vs `12:00`, `\frac{2}{0}` vs `\frac{1}{0}`: a zero denominator equals nothing
                if self._same_tree(g, t):
                    return "T"
                # Numbers and structures of numbers are decided exactly by us first (cheaper than math-verify's
                # simplify, and exact); anything else goes to math-verify, whose True we then re-check.
                try:
                    verdict = self._guarded(g, t, guard_s)
                except _GuardTimeout:
                    return "E"
                if verdict is True:
                    return "T"
                if verdict is False:
                    continue
                if self.verify(g, t, timeout_seconds=timeout):
                    return "T"
        return "F"

    def _same_tree(self, a, b) -> bool:
        """The same expression up to the order of commutative arguments. The parser builds unevaluated trees, so
        `\\sqrt{\\sqrt{7}+5}` and `\\sqrt{5+\\sqrt{7}}` are unequal objects whose difference sympy does not cancel;
        deciding that by `is_zero` or math-verify's simplify took seconds for nested radicals. `srepr` prints the
        arguments of Add/Mul in canonical order, so equal printouts are equal expressions."""
        try:
            return self.sympy.srepr(a) == self.sympy.srepr(b)
        except Exception:
            return False

    def _degenerate(self, x) -> bool:
        """Holds a division by zero (sympy's zoo) or an undefined value: all such values would compare equal."""
        sp = self.sympy
        if not isinstance(x, sp.Basic):
            return False
        if x.has(sp.zoo, sp.nan):
            return True
        # The parser keeps `\frac{x+1}{0}` unevaluated, as (x + 1) * 0**-1: no zoo appears until it is simplified.
        return any(
            isinstance(node, sp.Pow) and node.base == 0 and node.exp.is_negative for node in sp.preorder_traversal(x)
        )

    # ----- exactness guard: math-verify rounds to 6 digits; we re-check numbers exactly -----

    def _guarded(self, g, t, seconds: float):
        old = signal.signal(signal.SIGALRM, _raise_guard_timeout)
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.05))
        try:
            return self._agree(g, t)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    def _agree(self, a, b):
        """False when a and b are provably different numbers (or structures of numbers); None when unsure."""
        sp = self.sympy
        as_sets = self._relation_agree(a, b)
        if as_sets is not None:
            return as_sets
        if isinstance(a, sp.MatrixBase) and isinstance(b, sp.MatrixBase):
            if a.shape != b.shape:
                return False
            return self._all_agree(list(a), list(b))
        if isinstance(a, sp.Interval) and isinstance(b, sp.Interval):
            if a.left_open != b.left_open or a.right_open != b.right_open:
                return False
            return self._all_agree([a.start, a.end], [b.start, b.end])
        if isinstance(a, sp.Tuple) and isinstance(b, sp.Tuple):
            if len(a) != len(b):
                return False
            return self._all_agree(list(a.args), list(b.args))
        if isinstance(a, sp.FiniteSet) and isinstance(b, sp.FiniteSet):
            if len(a) != len(b):
                return False
            rest = list(b.args)
            for x in a.args:
                j = next((j for j, y in enumerate(rest) if self._agree(x, y) is not False), None)
                if j is None:
                    return False
                rest.pop(j)
            return True
        if isinstance(a, sp.Expr) and isinstance(b, sp.Expr) and not a.is_Relational and not b.is_Relational:
            return self._expr_agree(a, b)
        return None

    # ----- relations in solved form are sets: `-1 \le y \le 4`, `y \in [-1, 4]` and `[-1, 4]` -----

    def _relation_agree(self, a, b):
        """Compare as sets, exactly, when at least one side is a relation and both are sets of numbers. Only a solved
        form is read as a set (a lone variable against bounds free of variables): the question's own inequality
        (`x^2 < 4`) is not its solution, which is why Math-Verify compares relations with sets one way only (README,
        "allow_set_relation_comp"). Math-Verify still handles every other pair."""
        sa, sb = self._as_set(a), self._as_set(b)
        if sa is None or sb is None or (sa[0] is None and sb[0] is None):
            return None
        if sa[0] is not None and sb[0] is not None and sa[0] != sb[0]:
            return False  # `y \ge 5` is not `x \ge 5`
        return self._sets_equal(sa[1], sb[1])

    def _as_set(self, e):
        """(variable or None, its set of values) for an interval, a union, `x \\in S` or a relation in solved form;
        None for anything else."""
        sp = self.sympy
        if isinstance(e, (sp.Interval, sp.Union)):
            return None if e.free_symbols else (None, e)
        if isinstance(e, sp.Equality) and isinstance(e.lhs, sp.Symbol) and isinstance(e.rhs, (sp.Interval, sp.Union)):
            return None if e.rhs.free_symbols else (e.lhs, e.rhs)
        var, sets = None, []
        for r in e.args if isinstance(e, sp.And) else [e]:
            solved = self._solved(r)
            if solved is None or (var is not None and solved[0] != var):
                return None
            var = solved[0]
            sets.append(solved[1])
        return var, sp.Intersection(*sets)

    def _solved(self, r):
        """`x > a`, `a \\le x`, `x \\ne a` with `a` a real number or an infinity: (x, the interval or union)."""
        sp = self.sympy
        flip = {sp.StrictLessThan: sp.StrictGreaterThan, sp.LessThan: sp.GreaterThan, sp.Unequality: sp.Unequality}
        flip.update({v: k for k, v in flip.items()})
        if type(r) not in flip:
            return None
        var, bound, rel = r.lhs, r.rhs, type(r)
        if not isinstance(var, sp.Symbol):
            var, bound, rel = bound, var, flip[rel]  # `5 \le x` is `x \ge 5`
        if not isinstance(var, sp.Symbol) or bound.free_symbols or bound.is_extended_real is not True:
            return None
        oo = sp.oo
        if rel is sp.Unequality:
            return var, sp.Union(sp.Interval(-oo, bound, True, True), sp.Interval(bound, oo, True, True))
        if rel in (sp.StrictGreaterThan, sp.GreaterThan):
            return var, sp.Interval(bound, oo, rel is sp.StrictGreaterThan, True)
        return var, sp.Interval(-oo, bound, True, rel is sp.StrictLessThan)

    def _sets_equal(self, a, b) -> bool:
        sp = self.sympy
        if a == b:
            return True
        if isinstance(a, sp.Interval) and isinstance(b, sp.Interval):
            same_ends = (a.left_open, a.right_open) == (b.left_open, b.right_open)
            return same_ends and all(self._expr_agree(x, y) is True for x, y in ((a.start, b.start), (a.end, b.end)))
        if isinstance(a, sp.Union) and isinstance(b, sp.Union) and len(a.args) == len(b.args):
            try:
                pieces = [sorted(s.args, key=lambda i: (float(i.inf), float(i.sup))) for s in (a, b)]
            except (TypeError, ValueError):
                return False
            return all(self._sets_equal(x, y) for x, y in zip(*pieces, strict=True))
        return False

    def _all_agree(self, xs, ys):
        verdicts = [self._agree(x, y) for x, y in zip(xs, ys, strict=True)]
        return False if any(v is False for v in verdicts) else True

    def _expr_agree(self, a, b):
        sp = self.sympy
        a, b = _exactify(sp, a), _exactify(sp, b)
        if a.has(sp.oo, -sp.oo, sp.zoo, sp.nan) or b.has(sp.oo, -sp.oo, sp.zoo, sp.nan):
            return a == b
        diff = a - b
        zero = diff.is_zero
        if zero is not None:
            return bool(zero)
        symbols = sorted(diff.free_symbols, key=str)
        rng = random.Random(0)
        # Expressions in free symbols: compare at random rational points (different there = different functions).
        points = [{}]
        if symbols:
            points = [
                {s: sp.Rational(rng.choice([-1, 1]) * rng.randint(3, 97), rng.randint(3, 31)) for s in symbols}
                for _ in range(3)
            ]
        for point in points:
            d = sp.N(diff.subs(point), 60)
            scale = max(abs(sp.N(a.subs(point), 60)), abs(sp.N(b.subs(point), 60)))
            if not d.is_number or not scale.is_number:
                return None
            if abs(d) > sp.Float("1e-40", 60) * scale:
                return False
        return True


def _exactify(sp, e):
    # Any Float left (e.g. from scientific notation) is replaced by the exact decimal it prints as.
    floats = e.atoms(sp.Float)
    if not floats:
        return e
    return e.xreplace({f: sp.Rational(str(f)) for f in floats})


def _raise_guard_timeout(signum, frame):
    raise _GuardTimeout()


_WARM_UP = [
    ("\\frac{3\\pi}{4}", "2.3562"),
    ("4\\sqrt{3}", "\\sqrt{48}"),
    ("x^2+3x+2", "3x+x^2+2"),
    ("(1, 5]", "[1, 5]"),
    ("(3, -2)", "(-2, 3)"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("y=2x+1", "y=1+2x"),
    ("x>1", "x>2"),
]


def _warm_up(comp: _Comparator) -> None:
    """Run one comparison of each common shape: sympy's first calls are 10-50x slower (lazy imports and caches), and
    paying that here, before the worker reports ready, keeps it out of the first training step's reward time."""
    for g, p in _WARM_UP:
        try:
            comp.match(comp.gold(g, 5), p, 5, 4.0)
        except Exception:
            pass
    comp.gold_cache.clear()
    comp.gold_parses = comp.pred_checks = 0


def _watch_parent(ppid: int) -> None:
    # The parent normally closes our stdin; this covers a parent that died while we were busy.
    while True:
        time.sleep(1.0)
        if os.getppid() != ppid:
            os._exit(0)


def main() -> None:
    ppid = os.getppid()
    out = sys.stdout
    try:
        import resource

        mem_mb = int(os.environ.get("REWARD_FUNCS_MATH_MEM_MB", "0"))
        comp = _Comparator()
        if mem_mb > 0:
            limit = mem_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except Exception as exc:  # report start-up failures to the parent instead of dying silently
        out.write("X " + repr(exc).replace("\n", " ") + "\n")
        out.flush()
        return
    threading.Thread(target=_watch_parent, args=(ppid,), daemon=True).start()
    if os.environ.get("REWARD_FUNCS_MATH_WARMUP", "1") == "1":
        _warm_up(comp)
    out.write("R\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        if "stats" in req:
            out.write(f"S {comp.gold_parses} {comp.pred_checks}\n")
            out.flush()
            continue
        t = float(req["t"])
        mv_t = max(1, int(t))
        try:
            gold = comp.gold(req["g"], mv_t)
        except Exception:
            gold = []
        out.write("G 1\n" if gold else "G 0\n")
        out.flush()
        if not gold:
            continue
        for i, (_, pred) in enumerate(req["p"]):
            try:
                v = comp.match(gold, pred, mv_t, 0.8 * t)
            except MemoryError:
                v = "F"
            except RecursionError:
                v = "F"
            except Exception:
                v = "F"
            out.write(f"V {i} {v}\n")
            out.flush()


if __name__ == "__main__":
    main()
