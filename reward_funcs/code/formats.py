"""Test formats of a ``tests`` cell and the comparisons of what a program produced with what a test expects.

* assert-style Python: a string of assert statements, or a list of such strings (MBPP's ``test_list``); run by the
  sandboxed oracle (:mod:`reward_funcs.code.asserts`);
* stdin/stdout: ``{"inputs": ["1 2\\n"], "outputs": ["3\\n"]}``, compared with :func:`stdout_matches`;
* call-based: ``{"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]}``, compared with :func:`values_match`.

A JSON string of a dict is accepted too.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

from .asserts import UnsupportedTests


def parse_tests(tests: Any) -> tuple[str, Any]:
    """Normalise a ``tests`` cell to ("assert", source) | ("stdio", (inputs, outputs)) | ("call", (fn, in, out))."""
    if isinstance(tests, bytes):
        tests = tests.decode()
    if isinstance(tests, str) and tests.lstrip().startswith("{"):
        try:
            tests = json.loads(tests)
        except ValueError:
            pass
    if isinstance(tests, str):
        return "assert", tests
    if isinstance(tests, (list, tuple)):
        for position, item in enumerate(tests):
            if not isinstance(item, str):
                raise UnsupportedTests(
                    f"a tests list must hold assert statements as strings (MBPP's test_list), but item {position} "
                    f"is {_describe(item)}"
                )
        return "assert", "\n".join(tests)  # MBPP's test_list
    if not isinstance(tests, dict):
        raise UnsupportedTests(f"tests must be {_TEST_FORMATS}; got {_describe(tests)}")
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    missing = [key for key, value in (("inputs", inputs), ("outputs", outputs)) if not isinstance(value, list)]
    if missing:
        raise UnsupportedTests(
            f"a tests dict needs 'inputs' and 'outputs' lists; {' and '.join(repr(k) for k in missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing or not a list (keys present: {sorted(map(str, tests))})"
        )
    if len(inputs) != len(outputs):
        raise UnsupportedTests(
            f"a tests dict needs as many 'outputs' as 'inputs'; got {len(inputs)} inputs and {len(outputs)} outputs"
        )
    if not inputs:
        raise UnsupportedTests("tests have no cases")
    fn = tests.get("fn_name")
    if fn:
        return "call", (str(fn), [i if isinstance(i, list) else [i] for i in inputs], outputs)

    def as_text(v):
        return "\n".join(map(str, v)) + "\n" if isinstance(v, list) else str(v)

    return "stdio", ([as_text(i) for i in inputs], [as_text(o) for o in outputs])


_TEST_FORMATS = (
    "a string of assert statements, a list of such strings, or a dict with 'inputs' and 'outputs' lists "
    "(a JSON string of one is accepted too)"
)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _stdout_lines(text: str) -> list[str]:
    text = text.replace("\r\n", "\n")
    if text.endswith("\n"):
        text = text[:-1]
    return [line.rstrip() for line in text.split("\n")]


def stdout_matches(actual: str, expected: str, float_tol: float | None = None) -> bool:
    """Compare program output: CRLF = LF, trailing whitespace per line and one final newline ignored; any other
    difference (extra or missing lines, ``3.0`` vs ``3``) fails unless ``float_tol`` allows numeric tokens to differ
    (see :func:`numbers_match`; an integer token is one written as an integer, ``2`` but not ``2.0``).

    >>> stdout_matches("3 \\r\\n", "3"), stdout_matches("3\\n4\\n", "3\\n"), stdout_matches("3.0", "3")
    (True, False, False)
    >>> stdout_matches("2.5000001", "2.5", float_tol=1e-6), stdout_matches("3.0000001", "3", float_tol=1e-6)
    (True, False)
    >>> stdout_matches("999999000.0", "999999937", float_tol=1e-6), stdout_matches("inf", "1" * 5000, float_tol=1e-6)
    (False, False)
    """
    a, e = _stdout_lines(actual), _stdout_lines(expected)
    if a == e:
        return True
    if float_tol is None or len(a) != len(e):
        return False
    for la, le in zip(a, e, strict=True):
        ta, te = la.split(), le.split()
        if len(ta) != len(te):
            return False
        for x, y in zip(ta, te, strict=True):
            if x != y and not _tokens_match(x, y, float_tol):
                return False
    return True


_INTEGER_TOKEN = re.compile(r"[+-]?[0-9]+")


def _decimal(token: str) -> Decimal | None:
    """An output token as an exact number (any size, no float rounding), or None when it is not a finite number."""
    try:
        d = Decimal(token)
    except (ArithmeticError, ValueError):
        return None
    return d if d.is_finite() else None


def _tokens_match(x: str, y: str, tol: float) -> bool:
    """Output token ``x`` against expected token ``y`` under ``float_tol``: see :func:`numbers_match`."""
    a = _decimal(x)
    if a is None:  # not a finite number (a word, ``inf``, ``nan``): only the same text matched
        return False
    if _INTEGER_TOKEN.fullmatch(y):
        return a == Decimal(y)
    e = _decimal(y)
    return e is not None and numbers_match(float(a), float(e), tol)


def numbers_match(actual: int | float, expected: int | float, tol: float | None) -> bool:
    """The number rule of ``float_tol`` (stdout tokens and call-based values): an integer expected value is matched
    only by an output exactly equal to it, at any size; the tolerance (relative or absolute) is for non-integer
    expected values; a non-finite output never matches a finite expected value. Exact comparisons use Python's
    ``int``/``float`` comparison (stdout: ``Decimal``), never a conversion to ``float`` that overflows or rounds.

    >>> numbers_match(999999000.0, 999999937, 1e-6), numbers_match(10**400, 10**400, 1e-6), numbers_match(4.0, 4, 0.1)
    (False, True, True)
    >>> numbers_match(2.5000001, 2.5, 1e-6), numbers_match(float("inf"), 2.5, 1e-6), numbers_match(10**400, 2.5, 1e-6)
    (True, False, False)
    """
    if type(expected) is int or tol is None:
        return actual == expected
    try:
        return math.isclose(float(actual), float(expected), rel_tol=tol, abs_tol=tol)
    except OverflowError:  # an int too large for a float is close to no float
        return False


def _json_key(k: Any) -> Any:
    if isinstance(k, str):
        return k
    if k is None or isinstance(k, bool):
        return json.dumps(k)
    if isinstance(k, (int, float)):
        return json.dumps(k)
    return object()  # unmatchable


def values_match(actual: Any, expected: Any, float_tol: float | None = None) -> bool:
    """Call-based comparison of a returned value (plain data) with a JSON expected value. Tuples count as lists
    (JSON has none); ``bool`` is not ``int``; ``3.0`` is not ``3`` unless ``float_tol`` is set, which applies to
    non-integer expected values only (:func:`numbers_match`).

    >>> values_match((1, [2]), [1, [2]]), values_match(3.0, 3), values_match(3.0, 3, 1e-9), values_match(True, 1)
    (True, False, True, False)
    >>> values_match(3.0000001, 3, 1e-6), values_match(3.0000001, 3.0, 1e-6)
    (False, True)
    """
    te = type(expected)
    if expected is None or te in (bool, str):
        return type(actual) is te and actual == expected
    if te in (int, float):
        if type(actual) not in (int, float):
            return False
        if float_tol is None:
            return type(actual) is te and actual == expected
        return numbers_match(actual, expected, float_tol)
    if te is list:
        return (
            type(actual) in (list, tuple)
            and len(actual) == len(expected)
            and all(values_match(a, e, float_tol) for a, e in zip(actual, expected, strict=True))
        )
    if te is dict:
        if type(actual) is not dict:
            return False
        norm = {_json_key(k): v for k, v in actual.items()}
        return (
            len(norm) == len(actual)
            and set(norm) == set(expected)
            and all(values_match(norm[k], expected[k], float_tol) for k in expected)
        )
    return False
