"""Comparing prepared answers: the values an answer states, named values, hedges, and unordered lists.

A pure function of the two prepared answers and an oracle for atomic (predicted value, gold value) pairs; the oracle
answers from exact string / number checks or known verdicts and records what the symbolic workers must decide
(see `answers._score_pairs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from . import extract as _ex
from . import normalize as _nz


@dataclass(frozen=True)
class _Prepared:
    canon: str
    values: tuple[str, ...]  # the stated values (several for lists, `\pm` anywhere, "or", several boxes)


@lru_cache(maxsize=65536)
def _prepare(answer: str | None) -> _Prepared | None:
    canon = _nz.canonical(answer)
    if canon is None:
        return None
    values = _nz.split_values(canon)
    if not values:
        return None
    return _Prepared(canon, _distinct(values))


def _distinct(values: list[str]) -> tuple[str, ...]:
    """The values without repeats that are equal as written or as exact numbers: `5, i.e. 5.0` states one value,
    not a hedge (the same value in two forms that only sympy can equate still counts as two)."""
    out, seen = [], set()
    for v in values:
        key = _exact(v)
        if key is None:
            key = _structure(v)
        if key is None:
            key = _nz.compact(v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return tuple(out)


@lru_cache(maxsize=65536)
def _prepare_gold(solution: str | None) -> _Prepared | None:
    if solution is None:
        return None
    return _prepare(_ex.gold_answer(str(solution)))


@lru_cache(maxsize=65536)
def _exact(s: str):
    return _nz.exact_value(s)


@lru_cache(maxsize=65536)
def _structure(s: str):
    return _nz.exact_structure(s)


@lru_cache(maxsize=65536)
def _sides(value: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names, values = _nz.equation_sides(value)
    return tuple(_nz.compact(n) for n in names), tuple(values)


def _gold_atoms(g: _Prepared) -> set[str]:
    """Gold strings the symbolic worker must be able to parse (plain numbers never need it)."""
    atoms = set()
    for v in g.values:
        names, vals = _sides(v)
        targets = [v] if len(vals) != 1 else list(vals)
        atoms.update(t for t in targets if _exact(t) is None and _structure(t) is None)
    return atoms


# ----------------------------------------------------------------------------------------------------------------------
# Comparison: a pure function of the two prepared answers and an oracle for atomic (pred value, gold value) pairs.


class _Oracle:
    """Answers atom comparisons from cheap checks or known verdicts; records the ones the workers must decide."""

    def __init__(self, known: dict, cache) -> None:
        self.known = known
        self.cache = cache  # verdicts of earlier calls (a `get(key)` that returns None when unknown)
        self.needed: set[tuple[str, str]] = set()

    def __call__(self, p: str, g: str) -> bool:
        if _nz.compact(p) == _nz.compact(g):
            return True
        pe, ge = _exact(p), _exact(g)
        if pe is not None and ge is not None:
            return pe == ge
        ps, gs = _structure(p), _structure(g)
        if ps is not None and gs is not None:  # intervals / tuples of plain numbers: no sympy needed either
            return ps == gs
        key = (p, g)
        v = self.known.get(key)
        if v is None:
            v = self.cache.get(key)
        if v is None:
            self.needed.add(key)
            return False
        return v


def _compare(p: _Prepared, g: _Prepared, atom: Callable[[str, str], bool]) -> bool:
    if _nz.compact(p.canon) == _nz.compact(g.canon):
        return True
    if len(p.values) != len(g.values):
        return False  # hedge: several candidates against fewer gold values (or the other way round)
    if len(g.values) == 1:
        return _value_match(p.values[0], g.values[0], atom)
    # Unordered lists: every predicted value matches a distinct gold value.
    table = [[_value_match(pv, gv, atom) for gv in g.values] for pv in p.values]
    return _perfect_matching(table)


def _value_match(p: str, g: str, atom: Callable[[str, str], bool]) -> bool:
    if _nz.compact(p) == _nz.compact(g):
        return True
    p_names, p_vals = _sides(p)
    g_names, g_vals = _sides(g)
    if len(g_vals) != 1:
        # The gold is a genuine equation (or only names): compare whole equations, the prediction must be one too.
        return len(p_vals) + len(p_names) > 1 and atom(p, g)
    if g_names and p_names and not set(p_names) & set(g_names):
        return False  # `y = ...` against gold `x = ...`
    if not p_vals:
        return False
    # Every side that is not a bare name must equal the gold: `7 = 5` against 5 is a hedge, `x = 5` is fine.
    verdicts = [atom(v, g_vals[0]) for v in p_vals]  # no short-circuit: collect all atoms in one round
    return all(verdicts)


def _perfect_matching(table: list[list[bool]]) -> bool:
    n = len(table)
    match_of_gold = [-1] * n

    def augment(i: int, seen: list[bool]) -> bool:
        for j in range(n):
            if table[i][j] and not seen[j]:
                seen[j] = True
                if match_of_gold[j] < 0 or augment(match_of_gold[j], seen):
                    match_of_gold[j] = i
                    return True
        return False

    return all(augment(i, [False] * n) for i in range(n))
