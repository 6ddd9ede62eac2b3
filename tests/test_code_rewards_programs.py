"""Test programs that cannot be split into probes (HumanEval checks with asserts in loops, helpers, comprehensions):
one all-or-nothing test, run with the same cheat-proofing as the split asserts, on every available backend.

The hostile corpus of ``test_code_rewards_sandbox`` is reused: each cheat pairs a *wrong* ``double`` with a trick,
and must score 0 against a loop-style check; the ``secret`` problem expects a token that exists only in this
process, so any pass means the expected value leaked into the candidate's reach.
"""

from __future__ import annotations

import pytest
from test_code_rewards_sandbox import (  # noqa: F401  (host_unharmed: autouse fixture, checked after every test)
    CHEATS,
    FIND_SECRET,
    LIMITS,
    SEARCH_TIMEOUT_S,
    SECRET,
    TIMEOUT_TO_HIT,
    fenced,
    host_unharmed,
    program,
)

from reward_funcs import code_reward_partial, make_code_reward, run_code_tests
from reward_funcs.code.sandbox import SandboxUnavailable, resolve_backend

# HumanEval style: the harness calls check(<entry_point>); asserts inside a loop and a debugging `assert True`.
DOUBLE_LOOP = (
    "METADATA = {'author': 'x'}\n\n"
    "def check(candidate):\n"
    "    for x in [21, -1, 0, 7]:\n"
    "        assert candidate(x) == 2 * x\n"
    "    assert True, 'This prints if this assert fails 1 (good for debugging!)'\n"
)
SECRET_LOOP = f"def check(candidate):\n    for x in [1, 2]:\n        assert candidate(x) == {SECRET!r}\n"


@pytest.fixture(params=["namespaces", "rlimits"], scope="module")
def isolation(request):
    try:
        resolve_backend(request.param)
    except SandboxUnavailable as exc:
        pytest.skip(f"{request.param} isolation unavailable here: {exc}")
    return request.param


def score(code: str, tests: str, entry: str | None = "double", partial: bool = False, **kw) -> float | None:
    reward = make_code_reward(partial_credit=partial, **{**LIMITS, **kw})
    return reward([fenced(code)], tests=[tests], entry_point=[entry])[0]


# -- HumanEval-style programs: 1 for a correct solution, 0 for a wrong one ------------------------------------

FIND_ZERO_TESTS = """
METADATA = {}


def check(candidate):
    import math
    import random
    rng = random.Random(42)
    import copy
    for _ in range(100):
        ncoeff = 2 * rng.randint(1, 4)
        coeffs = []
        for _ in range(ncoeff):
            coeff = rng.randint(-10, 10)
            if coeff == 0:
                coeff = 1
            coeffs.append(coeff)
        solution = candidate(copy.deepcopy(coeffs))
        assert math.fabs(poly(coeffs, solution)) < 1e-4
"""
POLY = "import math\n\ndef poly(xs, x):\n    return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))\n\n"
FIND_ZERO_GOOD = POLY + (
    "def find_zero(xs):\n    begin, end = -1.0, 1.0\n    while poly(xs, begin) * poly(xs, end) > 0:\n"
    "        begin *= 2.0\n        end *= 2.0\n    while end - begin > 1e-10:\n        center = (begin + end) / 2.0\n"
    "        if poly(xs, center) * poly(xs, begin) > 0:\n            begin = center\n        else:\n"
    "            end = center\n    return begin\n"
)
FIND_ZERO_BAD = POLY + "def find_zero(xs):\n    return 0.0\n"

CYCLIC_TESTS = """
def check(candidate):
    from random import randint, choice
    import string
    letters = string.ascii_lowercase
    for _ in range(100):
        s = ''.join(choice(letters) for i in range(randint(10, 20)))
        encoded_str = encode_cyclic(s)
        assert candidate(encoded_str) == s
"""
ENCODE = (
    "def encode_cyclic(s):\n    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]\n"
    "    groups = [(group[1:] + group[0]) if len(group) == 3 else group for group in groups]\n"
    "    return ''.join(groups)\n\n"
)
DECODE_GOOD = ENCODE + "def decode_cyclic(s):\n    return encode_cyclic(encode_cyclic(s))\n"
DECODE_BAD = ENCODE + "def decode_cyclic(s):\n    return encode_cyclic(s)\n"

ADD_RANDOM_TESTS = """
METADATA = {}

def check(candidate):
    import random
    assert candidate(0, 1) == 1
    assert candidate(5, 7) == 12
    for i in range(100):
        x, y = random.randint(0, 1000), random.randint(0, 1000)
        assert candidate(x, y) == x + y
"""
ADD_GOOD = "def add(x: int, y: int):\n    return x + y\n"
ADD_BAD = "def add(x: int, y: int):\n    return x + y if x < 900 else 0\n"  # wrong on a tenth of the random inputs

RAISES_TESTS = """
def check(candidate):
    for bad in [-1, -5]:
        try:
            candidate(bad)
        except ValueError:
            pass
        else:
            assert False, "negative input must raise ValueError"
    for n, r in [(0, 1), (5, 120)]:
        assert candidate(n) == r
"""
FACT_GOOD = (
    "def fact(n):\n    if n < 0:\n        raise ValueError('negative')\n    out = 1\n    for k in range(2, n + 1):\n"
    "        out *= k\n    return out\n"
)
FACT_BAD = (
    "def fact(n):\n    if n < 0:\n        raise TypeError('negative')\n    return 1 if n < 2 else n * fact(n - 1)\n"
)

CASES = [
    pytest.param(FIND_ZERO_TESTS, "find_zero", FIND_ZERO_GOOD, FIND_ZERO_BAD, id="find_zero-random-loop-helper"),
    pytest.param(CYCLIC_TESTS, "decode_cyclic", DECODE_GOOD, DECODE_BAD, id="decode_cyclic-loop-helper"),
    pytest.param(ADD_RANDOM_TESTS, "add", ADD_GOOD, ADD_BAD, id="add-random-loop"),
    pytest.param(RAISES_TESTS, "fact", FACT_GOOD, FACT_BAD, id="expected-exception-in-loop"),
    pytest.param(
        "assert all(double(i) == 2 * i for i in range(50))",
        None,
        "def double(x):\n    return 2 * x\n",
        "def double(x):\n    return 2 * x if x != 37 else 0\n",
        id="comparison-in-generator",
    ),
    pytest.param(
        "def helper(x):\n    return double(x) == x + x\n\nassert helper(3) and helper(-4)",
        None,
        "def double(x):\n    return x * 2\n",
        "def double(x):\n    return x * 2 if x > 0 else x\n",
        id="helper-function",
    ),
]


@pytest.mark.parametrize(("tests", "entry", "good", "bad"), CASES)
def test_program_tests_score_one_for_correct_and_zero_for_wrong(tests, entry, good, bad):
    assert score(good, tests, entry, timeout_s=4) == 1.0
    assert score(bad, tests, entry, timeout_s=4) == 0.0
    # Partial credit: the whole program is one test, so the same 1 and 0.
    assert score(good, tests, entry, partial=True, timeout_s=4) == 1.0
    assert score(bad, tests, entry, partial=True, timeout_s=4) == 0.0


def test_program_test_is_one_outcome_with_a_reason():
    report = run_code_tests("def double(x):\n    return x\n", DOUBLE_LOOP, entry_point="double", **LIMITS)
    assert [o.outcome for o in report.outcomes] == ["failed"]
    assert "AssertionError" in report.outcomes[0].detail
    report = run_code_tests("def double(x):\n    return 2 * x\n", DOUBLE_LOOP, entry_point="double", **LIMITS)
    assert [o.outcome for o in report.outcomes] == ["passed"] and report.all_passed


def test_program_that_never_calls_the_solution_fails():
    tests = "for x in []:\n    assert double(x) == 2 * x"  # the loop body never runs
    assert score("def double(x):\n    return 2 * x\n", tests, None) == 0.0


def test_slow_and_hungry_solutions_get_their_outcome():
    slow = "def double(x):\n    while True:\n        pass\n"
    report = run_code_tests(slow, DOUBLE_LOOP, entry_point="double", **{**LIMITS, "timeout_s": TIMEOUT_TO_HIT})
    assert [o.outcome for o in report.outcomes] == ["timeout"]
    hungry = "def double(x):\n    return bytearray(1 << 34)\n"
    out = run_code_tests(hungry, DOUBLE_LOOP, entry_point="double", **LIMITS).outcomes
    assert [o.outcome for o in out] == ["memory"]


# -- cheats: every trick with a wrong solution scores 0, on every backend -------------------------------------

PROGRAM_CHEATS = {
    **CHEATS,
    # Kill everything this uid may signal: the oracle shares the sandbox uid.
    "kill_every_process": dict(
        tail="import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass"
    ),
    # Write a fake verdict into every fd of every process it can open (the oracle's report pipe included).
    "forge_oracle_verdict": dict(
        top="import os\n"
        "def _forge():\n"
        '    msg = b\'{"o": "loaded"}\\n{"o": "ok", "v": true}\\n\'\n'
        "    for pid in os.listdir('/proc'):\n"
        "        if not pid.isdigit():\n            continue\n"
        "        for fd in range(0, 16):\n"
        "            try:\n"
        "                with open(f'/proc/{pid}/fd/{fd}', 'wb', buffering=0) as f:\n"
        "                    f.write(msg)\n"
        "            except OSError:\n                pass\n"
        "    for fd in range(0, 64):\n"
        "        try:\n            os.write(fd, msg)\n        except OSError:\n            pass\n",
        ret="_forge() or x + 1",
    ),
}


@pytest.mark.parametrize("cheat", sorted(PROGRAM_CHEATS))
def test_cheat_scores_zero_against_a_loop_check(cheat, isolation):
    spec = PROGRAM_CHEATS[cheat]
    code = program("call", spec.get("ret", "x + 1"), spec.get("top", ""), spec.get("tail", ""))
    assert score(code, DOUBLE_LOOP, isolation=isolation) == 0.0
    assert score(code, DOUBLE_LOOP, partial=True, isolation=isolation) == 0.0


def test_harmless_tricks_with_a_right_solution_still_pass():
    """The zeros above come from the wrong answer, not from a program that cannot run at all."""
    for cheat in ("kill_supervisor_and_escalate", "excepthook_exit"):
        spec = PROGRAM_CHEATS[cheat]
        assert score(program("call", "2 * x", spec.get("top", ""), spec.get("tail", "")), DOUBLE_LOOP) == 1.0, cheat


def test_expected_value_cannot_be_found_from_the_solution(isolation):
    code = program("call", "_find()", FIND_SECRET)
    assert score(code, SECRET_LOOP, isolation=isolation, timeout_s=SEARCH_TIMEOUT_S) == 0.0
    assert score(program("call", repr(SECRET)), SECRET_LOOP) == 1.0  # the problem is scorable at all


def test_partial_credit_has_no_floor_from_asserts_that_never_call_the_solution():
    # HumanEval's `assert True, "..."` lines used to be tests that every program passed.
    tests = (
        "def check(candidate):\n    assert candidate(1) == 2\n    assert True, 'debug 1'\n"
        "    assert candidate(3) == 6\n    assert True, 'debug 2'\n"
    )
    for code in ("import os\nos._exit(0)", "def double(x):\n    return 0\n"):
        assert code_reward_partial([fenced(code)], tests=[tests], entry_point=["double"]) == [0.0]
    half = "def double(x):\n    return 2 if x == 1 else 0\n"
    assert code_reward_partial([fenced(half)], tests=[tests], entry_point=["double"]) == [0.5]
