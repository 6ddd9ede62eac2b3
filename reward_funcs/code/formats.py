"""Test formats of a ``tests`` cell and the comparisons of what a program produced with what a test expects.

* assert-style Python: a string of assert statements, or a list of such strings (MBPP's ``test_list``); split into
  probes and checks by :mod:`reward_funcs.code.asserts`;
* stdin/stdout: ``{"inputs": ["1 2\\n"], "outputs": ["3\\n"]}``, compared with :func:`stdout_matches`;
* call-based: ``{"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]}``, compared with :func:`values_match`.

A JSON string of a dict is accepted too.
"""

from __future__ import annotations

import json
import math
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
    difference (extra or missing lines, ``3.0`` vs ``3``) fails unless ``float_tol`` allows numeric tokens to differ:
    integer tokens still compare exactly, a token pair with a float in it within ``float_tol`` (relative or absolute).

    >>> stdout_matches("3 \\r\\n", "3"), stdout_matches("3\\n4\\n", "3\\n"), stdout_matches("3.0", "3")
    (True, False, False)
    >>> stdout_matches("3.0000001", "3", float_tol=1e-6), stdout_matches("999999000", "999999937", float_tol=1e-6)
    (True, False)
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
            if x != y and not _tokens_close(x, y, float_tol):
                return False
    return True


def _tokens_close(x: str, y: str, tol: float) -> bool:
    """Two output tokens as numbers: integers compare exactly, a float on either side within ``tol``."""
    try:
        return int(x) == int(y)
    except ValueError:
        pass
    try:
        return _numbers_close(float(x), float(y), tol)
    except ValueError:
        return False


def _numbers_close(a: int | float, b: int | float, tol: float) -> bool:
    """``a`` and ``b`` (one of them a float) within ``tol``; an int too large for a float is never close to one."""
    try:
        return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)
    except OverflowError:
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
    (JSON has none); ``bool`` is not ``int``; ``3.0`` is not ``3`` unless ``float_tol`` is set, which applies when a
    float is involved (two ints compare exactly; an int too large for a float matches no float).

    >>> values_match((1, [2]), [1, [2]]), values_match(3.0, 3), values_match(3.0, 3, 1e-9), values_match(True, 1)
    (True, False, True, False)
    """
    te = type(expected)
    if expected is None or te in (bool, str):
        return type(actual) is te and actual == expected
    if te in (int, float):
        if type(actual) not in (int, float):
            return False
        if float_tol is None or (type(actual) is int and te is int):  # the tolerance is for floats only
            return type(actual) is te and actual == expected
        return _numbers_close(actual, expected, float_tol)
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
