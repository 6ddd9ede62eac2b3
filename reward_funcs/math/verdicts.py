"""Verdicts of (answer, gold) pairs: rounds of symbolic comparison in killable workers, with caches.

:func:`_score_pairs` compares prepared answers (:mod:`.compare`); what the comparison cannot decide by itself (a
symbolic equivalence, whether a gold parses with sympy) is asked of a worker pool (:mod:`.pool`) in rounds, each
answer cached (bounded) so that GRPO's repeated golds cost one parse. One pool per (workers, memory limit) and
process; :func:`close_math_workers` stops them (also at interpreter exit). The reward functions are in
:mod:`.answers`.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Sequence

from .compare import _compare, _gold_atoms, _Oracle, _Prepared
from .pool import _Task, _WorkerPool

_VERDICT_CACHE_SIZE = 100_000
_CACHEABLE_CHARS = 200
_MAX_ROUNDS = 4


# ----------------------------------------------------------------------------------------------------------------------
# Worker pools (one per (workers, memory limit), per process)

_POOLS: dict[tuple[int, int], _WorkerPool] = {}
_POOLS_LOCK = threading.Lock()


def _default_workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def _get_pool(workers: int, mem_mb: int) -> _WorkerPool:
    key = (workers, mem_mb)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool.pid != os.getpid():  # after a fork the parent's workers are not ours
            pool = _WorkerPool(workers, mem_mb)
            _POOLS[key] = pool
        return pool


def close_math_workers() -> None:
    """Stop all verifier worker processes of this process (they restart on the next call).

    >>> close_math_workers()
    """
    with _POOLS_LOCK:
        pools = [p for p in _POOLS.values() if p.pid == os.getpid()]
        _POOLS.clear()
    for p in pools:
        p.close()


atexit.register(close_math_workers)


class _VerdictCache:
    """Bounded LRU of worker verdicts (timeouts are never cached: the next try may be luckier)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            v = self.data.get(key)
            if v is not None:
                self.data.move_to_end(key)
            return v

    def put(self, key, value) -> None:
        with self.lock:
            self.data[key] = value
            self.data.move_to_end(key)
            while len(self.data) > self.size:
                self.data.popitem(last=False)


_VERDICTS = _VerdictCache(_VERDICT_CACHE_SIZE)
_GOLD_STATUS = _VerdictCache(_VERDICT_CACHE_SIZE)  # gold atom -> parses with sympy?


def _score_pairs(
    pairs: Sequence[tuple[_Prepared | None, _Prepared | None]],
    timeout_s: float,
    workers: int,
    mem_mb: int,
    prompts: Sequence[str] | None = None,
) -> list[bool | None]:
    """Verdict per (pred, gold) pair: True / False, None when the gold cannot be parsed (`prompts`: each pair's
    question in `echo_form`, or None)."""
    prompts = prompts or [""] * len(pairs)
    golds = {g for _, g in pairs if g is not None}
    gold_atoms = {g: _gold_atoms(g) for g in golds}
    known: dict[tuple[str, str], bool] = {}
    status: dict[str, bool] = {}
    for atoms in gold_atoms.values():
        for a in atoms:
            s = _GOLD_STATUS.get(a)
            if s is not None:
                status[a] = s

    verdicts: list[bool] = [False] * len(pairs)
    for _ in range(_MAX_ROUNDS):
        oracle = _Oracle(known, _VERDICTS)
        for i, (p, g) in enumerate(pairs):
            if p is not None and g is not None:
                verdicts[i] = _compare(p, g, oracle, prompts[i])
        unknown_golds = {a for atoms in gold_atoms.values() for a in atoms if a not in status}
        if not oracle.needed and not unknown_golds:
            break
        _resolve(oracle.needed, unknown_golds, known, status, timeout_s, workers, mem_mb)

    out: list[bool | None] = []
    for (p, g), v in zip(pairs, verdicts, strict=True):
        if g is None or any(status.get(a) is False for a in gold_atoms[g]):
            out.append(None)
        else:
            out.append(bool(v) if p is not None else False)
    return out


def _resolve(needed, unknown_golds, known, status, timeout_s, workers, mem_mb) -> None:
    by_gold: dict[str, list] = defaultdict(list)
    for p, g in sorted(needed):
        by_gold[g].append(p)
    for g in unknown_golds:
        by_gold.setdefault(g, [])
    pool = _get_pool(workers, mem_mb)
    # Spread big groups over the workers (each worker parses the gold once for its share).
    total = sum(len(v) for v in by_gold.values())
    chunk = max(1, math.ceil(total / pool.n))
    tasks, keys = [], {}
    for g, preds in by_gold.items():
        if not preds:
            tasks.append(_Task(g, []))
        for k in range(0, len(preds), chunk):
            items = []
            for p in preds[k : k + chunk]:
                key = f"{len(keys)}"
                keys[key] = (p, g)
                items.append((key, p))
            tasks.append(_Task(g, items))
    res = pool.run(tasks, timeout_s)
    for g, ok in res.gold_ok.items():
        status[g] = ok
        _GOLD_STATUS.put(g, ok)
    for key, (p, g) in keys.items():
        v = res.verdicts.get(key)
        if v in ("T", "F"):
            known[(p, g)] = v == "T"
            if len(p) + len(g) <= _CACHEABLE_CHARS:  # bound the cache's memory, not just its length
                _VERDICTS.put((p, g), v == "T")
        else:
            known[(p, g)] = False  # timed out, crashed, or gold unparseable: no credit
