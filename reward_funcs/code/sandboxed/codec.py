"""Plain-data codec: values cross every process boundary of the sandbox as JSON with tags for the types JSON lacks.

The parent only ever compares builtin values it rebuilt itself from this encoding, so no object of the solution (a
custom ``__eq__``, an ``int`` subclass that equals everything) takes part in a verdict. Standard library only: it is
imported by the parent as ``reward_funcs.code.sandboxed.codec`` and inside the sandbox as ``sandboxed.codec``.
"""

from __future__ import annotations

import math
from collections import Counter

# Exact builtin types snapshotted at import time, before any candidate code runs in this interpreter.
_EXACT_SCALARS = (type(None), bool, str)

MAX_DEPTH = 64
MAX_NODES = 200_000
# Set and dict keys sharing one hash value make building the set quadratic (multiples of 2**61-1 all hash to 0):
# 200k such ints would keep the trainer busy for minutes. Plain data from an honest program never gets near this.
MAX_SAME_HASH = 32


class NotPlainData(TypeError):
    """Raised for values that are not plain data (custom classes, generators, ...)."""


def encode_value(value, _depth: int = 0, _budget: list | None = None):
    """Encode plain data as JSON-compatible structures; subclasses of builtins are reduced to the base value.

    >>> encode_value((1, [2.5, None], {"a": {3}}))
    {'$': 'tuple', 'v': [1, [2.5, None], {'$': 'dict', 'v': [['a', {'$': 'set', 'v': [3]}]]}]}
    """
    budget = _budget if _budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0 or _depth > MAX_DEPTH:
        raise NotPlainData("value too large or too deeply nested")
    t = type(value)
    if t in _EXACT_SCALARS:
        return value
    # Unbound base-class slots return the exact builtin value and ignore any override on a subclass
    # (an int subclass with __eq__ = lambda *a: True becomes the plain int it wraps).
    if isinstance(value, int):
        v = int.__int__(value)
        return v if -(2**53) < v < 2**53 else {"$": "int", "v": int.__format__(v, "x")}
    if isinstance(value, float):
        v = float.__float__(value)
        return v if math.isfinite(v) else {"$": "float", "v": float.__repr__(v)}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        v = complex.__complex__(value)
        return {"$": "complex", "v": [encode_value(v.real), encode_value(v.imag)]}
    if isinstance(value, (bytes, bytearray)):
        return {"$": "bytes", "v": bytes(value).hex()}
    nxt = _depth + 1
    if isinstance(value, list):
        return [encode_value(x, nxt, budget) for x in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"$": "tuple", "v": [encode_value(x, nxt, budget) for x in tuple.__iter__(value)]}
    if isinstance(value, frozenset):
        return {"$": "frozenset", "v": [encode_value(x, nxt, budget) for x in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"$": "set", "v": [encode_value(x, nxt, budget) for x in set.__iter__(value)]}
    if isinstance(value, dict):
        items = dict.items(value)
        return {"$": "dict", "v": [[encode_value(k, nxt, budget), encode_value(v, nxt, budget)] for k, v in items]}
    module = getattr(t, "__module__", "") or ""
    if module.split(".")[0] == "numpy" and hasattr(value, "tolist"):
        return encode_value(value.tolist(), nxt, budget)  # numpy scalars and arrays become Python data
    raise NotPlainData(f"return value of type {t.__name__!r} is not plain data")


def decode_value(obj, _depth: int = 0):
    """Inverse of :func:`encode_value`; raises ``ValueError`` on anything malformed.

    >>> decode_value({"$": "tuple", "v": [1, {"$": "frozenset", "v": [2]}]})
    (1, frozenset({2}))
    """
    if _depth > MAX_DEPTH + 1:
        raise ValueError("too deep")
    t = type(obj)
    if obj is None or t in (bool, int, float, str):
        return obj
    if t is list:
        return [decode_value(x, _depth + 1) for x in obj]
    if t is not dict or set(obj) != {"$", "v"}:
        raise ValueError("malformed value")
    tag, v = obj["$"], obj["v"]
    if tag == "int" and type(v) is str:
        return int(v, 16)
    if tag == "float" and v in ("nan", "inf", "-inf"):
        return float(v)
    if tag == "bytes" and type(v) is str:
        return bytes.fromhex(v)
    if type(v) is not list:
        raise ValueError("malformed value")
    items = [decode_value(x, _depth + 1) for x in v]
    if tag == "complex" and len(items) == 2 and all(type(x) is float or type(x) is int for x in items):
        return complex(items[0], items[1])
    if tag == "tuple":
        return tuple(items)
    if tag == "set":
        return set(check_hashes(items))
    if tag == "frozenset":
        return frozenset(check_hashes(items))
    if tag == "dict" and all(type(p) is list and len(p) == 2 for p in items):
        check_hashes([p[0] for p in items])
        return {k: val for k, val in items}
    raise ValueError(f"unknown tag {tag!r}")


def check_hashes(keys):
    """``keys``, unless more than ``MAX_SAME_HASH`` of them share a hash value (``ValueError``): counting hashes is
    linear, building a set of colliding keys is quadratic. ``TypeError`` for an unhashable key.

    >>> len(check_hashes([i * (2**61 - 1) for i in range(10)]))
    10
    >>> check_hashes([i * (2**61 - 1) for i in range(100)])
    Traceback (most recent call last):
    ...
    ValueError: too many set or dict keys with the same hash
    """
    keys = list(keys)
    counts = Counter(map(hash, keys))
    if counts and max(counts.values()) > MAX_SAME_HASH:
        raise ValueError("too many set or dict keys with the same hash")
    return keys


def check_size(obj) -> None:
    """Raise ``ValueError`` unless JSON ``obj`` (an encoded value) stays within what ``encode_value`` produces from
    ``MAX_NODES`` values ``MAX_DEPTH`` deep (a tag takes up to three JSON nodes and levels). Iterative: a deep value
    cannot exhaust the stack of the process checking it."""
    stack, nodes = [(obj, 0)], 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > 4 * MAX_NODES or depth > 3 * (MAX_DEPTH + 2):
            raise ValueError("value too large or too deeply nested")
        if type(node) is list:
            stack.extend((x, depth + 1) for x in node)
        elif type(node) is dict:
            stack.extend((x, depth + 1) for x in node.values())
