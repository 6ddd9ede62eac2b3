"""Comparing prepared answers: the values an answer states, named values, hedges, and unordered lists.

A pure function of the two prepared answers and an oracle for atomic (predicted value, gold value) pairs; the oracle
answers from exact string / number checks or known verdicts and records what the symbolic workers must decide
(see `verdicts._score_pairs`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from . import extract as _ex
from . import forms as _fm
from . import normalize as _nz


@dataclass(frozen=True)
class _Prepared:
    canon: str
    values: tuple[str, ...]  # the stated values (several for lists, `\pm` anywhere, "or", several boxes)
    grouped: bool = False  # the values are records `(a,b)=(3,4)` grouped from `a=3,b=4;a=6,b=1`


@lru_cache(maxsize=65536)
def _prepare(answer: str | None) -> _Prepared | None:
    canon = _nz.canonical(answer)
    if canon is None:
        return None
    values = _nz.split_values(canon)
    if not values:
        return None
    records = _records(values)
    if records is not None:
        return _Prepared(canon, _distinct(records), grouped=True)
    return _Prepared(canon, _distinct(values))


def _assignments(values) -> list[tuple[str, str]] | None:
    """[(name, value)] when every value is one `name = value`, else None."""
    out = []
    for v in values:
        names, vals = _sides(v)
        if len(names) != 1 or len(vals) != 1:
            return None
        out.append((names[0], vals[0]))
    return out


def _record(pairs: list[tuple[str, str]], order: list[str]) -> str:
    values = dict(pairs)
    return f"({','.join(order)})=({', '.join(values[n] for n in order)})"


def _records(values: list[str]) -> list[str] | None:
    """`a=3,b=4;a=6,b=1` (the names repeat in blocks) -> [`(a,b)=(3, 4)`, `(a,b)=(6, 1)`]: several named
    solutions, each a tuple in the order the first block names them, so they compare as tuples in any order."""
    pairs = _assignments(values)
    if pairs is None:
        return None
    names = [n for n, _ in pairs]
    k = names.index(names[0], 1) if names[0] in names[1:] else len(names)
    if k < 2 or k == len(names) or len(names) % k:
        return None
    order = names[:k]
    blocks = [pairs[i : i + k] for i in range(0, len(pairs), k)]
    if any(sorted(n for n, _ in b) != sorted(order) or len({n for n, _ in b}) != k for b in blocks):
        return None
    return [_record(b, order) for b in blocks]


def _single_record(values: tuple[str, ...]) -> str | None:
    """`x = 3, y = 4` -> `(x,y)=(3, 4)`: one named solution as a tuple, in the order written."""
    pairs = _assignments(values) if len(values) > 1 else None
    if pairs is None or len({n for n, _ in pairs}) != len(pairs):
        return None
    return _record(pairs, [n for n, _ in pairs])


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
def _words(s: str) -> bool:
    return _fm.is_words(s)


@lru_cache(maxsize=65536)
def _sides(value: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names, values = _nz.equation_sides(value)
    return tuple(_fm.name_key(n) for n in names), tuple(values)


def _gold_atoms(g: _Prepared) -> set[str]:
    """Gold strings the symbolic worker must be able to parse (plain numbers never need it)."""
    atoms = set()
    for v in g.values:
        names, vals = _sides(v)
        targets = [v] if len(vals) != 1 else list(vals)
        atoms.update(t for t in targets if _exact(t) is None and _structure(t) is None and not _words(t))
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
        if _words(p) or _words(g):
            return _nz.compact(p).casefold() == _nz.compact(g).casefold()
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


def _compare(p: _Prepared, g: _Prepared, atom: Callable[[str, str], bool], prompt: str = "") -> bool:
    """Whether prediction `p` states the gold `g`'s values; `prompt` (in `echo_form`, may be empty) is the question,
    whose own inequality restated is no answer (see `_value_match`)."""
    if _nz.compact(p.canon) == _nz.compact(g.canon):
        return True
    if p.grouped and not any(_sides(v)[0] for v in g.values):
        return False  # `b=3,a=4;...` against unnamed tuples: the gold does not say which entry is which name
    if len(p.values) != len(g.values):
        # One named solution written as a list on one side and as a tuple on the other: `(3, 4)` ~ `x=3, y=4`
        # (the gold's order), `y=4, x=3` ~ `(x,y)=(3,4)` (by name). Otherwise a hedge or a missing value.
        g_record = _single_record(g.values) if len(p.values) == 1 else None
        if g_record is not None:
            return _value_match(p.values[0], g_record, atom, prompt)
        p_record = _single_record(p.values) if len(g.values) == 1 and _sides(g.values[0])[0] else None
        if p_record is not None:
            return _value_match(p_record, g.values[0], atom, prompt)
        return False  # hedge: several candidates against fewer gold values (or the other way round)
    if len(g.values) == 1:
        return _value_match(p.values[0], g.values[0], atom, prompt)
    # Unordered lists: every predicted value matches a distinct gold value.
    table = [[_value_match(pv, gv, atom, prompt) for gv in g.values] for pv in p.values]
    return _perfect_matching(table)


def _value_match(p: str, g: str, atom: Callable[[str, str], bool], prompt: str = "") -> bool:
    if _nz.compact(p) == _nz.compact(g):
        return True
    if prompt and _fm.is_inequality(p) and not _fm.is_inequality(g) and _fm.echo_form(p) in prompt:
        # An inequality in solved form equals its interval, but "write -2 <= x <= 7 in interval notation" must not
        # be answered by copying the question: Math-Verify refuses all predicted relations against a gold set for
        # this reason (README, `allow_set_relation_comp`); we refuse only the copy.
        return False
    p_names, p_vals = _sides(p)
    g_names, g_vals = _sides(g)
    if len(g_vals) != 1:
        # The gold is a genuine equation (or only names): compare whole equations, the prediction must be one too.
        return len(p_vals) + len(p_names) > 1 and atom(p, g)
    if g_names and p_names and not set(p_names) & set(g_names):
        p_vals = _reordered(p_names, p_vals, g_names)
        if p_vals is None:
            return False  # `y = ...` against gold `x = ...`
    if not p_vals:
        return False
    # Every side that is not a bare name must equal the gold: `7 = 5` against 5 is a hedge, `x = 5` is fine.
    verdicts = [atom(v, g_vals[0]) for v in p_vals]  # no short-circuit: collect all atoms in one round
    return all(verdicts)


_COMMA = re.compile(",")


def _reordered(p_names, p_vals, g_names) -> tuple[str, ...] | None:
    """`(b,a)=(4,3)` against a gold named `(a,b)`: the value tuple put in the gold's order (None if not the same
    names)."""
    if len(p_names) != 1 or len(g_names) != 1 or len(p_vals) != 1:
        return None
    pn, gn, pv = p_names[0], g_names[0], _nz.compact(p_vals[0])
    if not (_nz.is_name(pn) and pn[0] == "(" and gn[0] == "(" and pv[:1] == "(" and pv[-1:] == ")"):
        return None
    p_order = _nz._top_level_splits(pn[1:-1], _COMMA)
    g_order = _nz._top_level_splits(gn[1:-1], _COMMA)
    entries = _nz._top_level_splits(pv[1:-1], _COMMA)
    if len(set(p_order)) != len(p_order) or sorted(p_order) != sorted(g_order) or len(entries) != len(p_order):
        return None
    by_name = dict(zip(p_order, entries, strict=True))
    return (f"({','.join(by_name[n] for n in g_order)})",)


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
