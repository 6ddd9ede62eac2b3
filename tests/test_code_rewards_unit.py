"""Code rewards: extraction, test formats, comparison rules, assert planning, codec, TRL plumbing."""

from __future__ import annotations

import json
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reward_funcs import code_reward, extract_code, make_code_reward, run_code_tests
from reward_funcs.code.asserts import UnsupportedTests, plan_asserts
from reward_funcs.code.formats import parse_tests as _parse_tests
from reward_funcs.code.formats import stdout_matches, values_match
from reward_funcs.code.sandboxed.codec import NotPlainData, decode_value, encode_value
from reward_funcs.inputs import MissingColumnError, completion_text

# -- code extraction ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tag", ["python", "py", "Python3", "PYTHON", "python3", "py3"])
def test_extract_python_tags(tag):
    assert extract_code(f"text\n```{tag}\nx = 1\n```\n") == "x = 1\n"


def test_extract_last_python_block_wins_over_earlier_and_bare_blocks():
    text = "```python\nx = 1\n```\n```\nbare = 1\n```\n```python\nx = 2\n```\n```text\nout\n```\n"
    assert extract_code(text) == "x = 2\n"


def test_extract_bare_block_only_when_no_python_block():
    assert extract_code("```\nprint(1)\n```\n```cpp\nint main(){}\n```") == "print(1)\n"
    assert extract_code("```cpp\nint main(){}\n```") is None


def test_extract_rejects_missing_unclosed_or_empty_blocks():
    assert extract_code("def f(): return 1") is None
    assert extract_code("```python\ndef f():\n    return 1\n") is None  # truncated completion
    assert extract_code("```python\n   \n```") is None


def test_extract_indented_fence_is_dedented_and_tilde_fences_work():
    assert extract_code("1. step\n    ```python\n    x = 1\n    ```\n") == "x = 1\n"
    assert extract_code("~~~python\nx = 3\n~~~\n") == "x = 3\n"


def _completion_text(completion):  # the rule code_reward reads a completion with
    return completion_text(completion, messages="all")


def test_completion_text_handles_conversational_and_multimodal_formats():
    assert _completion_text([{"role": "assistant", "content": "a"}]) == "a"
    assert _completion_text([{"role": "assistant", "content": [{"type": "text", "text": "b"}]}]) == "b"
    assert _completion_text([{"role": "tool", "content": "x"}, {"role": "assistant", "content": "c"}]) == "c"


# -- test formats -------------------------------------------------------------------------------------------


def test_parse_tests_three_formats_and_json_strings():
    assert _parse_tests("assert f(1) == 2") == ("assert", "assert f(1) == 2")
    assert _parse_tests(["assert f(1) == 2", "assert f(2) == 3"]) == ("assert", "assert f(1) == 2\nassert f(2) == 3")
    stdio = {"inputs": ["1\n"], "outputs": ["2\n"]}
    assert _parse_tests(stdio) == _parse_tests(json.dumps(stdio)) == ("stdio", (["1\n"], ["2\n"]))
    call = {"fn_name": "f", "inputs": [[1, 2]], "outputs": [3]}
    assert _parse_tests(json.dumps(call)) == ("call", ("f", [[1, 2]], [3]))


@pytest.mark.parametrize(
    "bad", [{"inputs": [1]}, {"inputs": [], "outputs": []}, 3, {"inputs": [1], "outputs": [1, 2]}]
)
def test_parse_tests_rejects_malformed(bad):
    with pytest.raises(UnsupportedTests):
        _parse_tests(bad)


def test_unusable_tests_give_none_and_a_warning():
    reward = make_code_reward()
    with pytest.warns(RuntimeWarning, match="unusable tests"):
        out = reward(["```python\nx=1\n```"], tests=["def t():\n    assert f(1) == 1"])
    assert out == [None]


def test_no_code_scores_zero_without_running(monkeypatch):
    import reward_funcs.code.sandbox as sb

    def boom(*a, **k):
        raise AssertionError("must not run")

    monkeypatch.setattr(sb, "run_job", boom)
    assert code_reward(["I think the answer is f(x) = 2x."], tests=["assert f(1) == 2"]) == [0.0]


# -- comparison rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actual", "expected", "ok"),
    [
        ("3\n", "3", True),
        ("3", "3\n", True),
        ("3  \t\n4 \n", "3\n4\n", True),
        ("3\r\n4\r\n", "3\n4\n", True),
        ("3\n4\n", "3\n", False),  # extra line
        ("3\n", "3\n4\n", False),  # missing line
        ("3\n\n", "3\n", False),  # an extra empty line is an extra line (only one final newline is ignored)
        (" 3\n", "3\n", False),  # leading whitespace is significant
        ("3.0\n", "3\n", False),
        ("1 2\n", "1  2\n", False),
    ],
)
def test_stdout_rules(actual, expected, ok):
    assert stdout_matches(actual, expected) is ok


def test_stdout_float_tolerance_is_opt_in_and_token_wise():
    assert stdout_matches("3.0 0.3333333\n", "3 0.333333333", float_tol=1e-6)  # 3.0 equals 3 exactly
    assert not stdout_matches("3.1\n", "3\n", float_tol=1e-6)
    assert not stdout_matches("3 x\n", "3 y\n", float_tol=1e-6)
    assert not stdout_matches("3\n", "3 3\n", float_tol=1e-6)


def test_float_tol_number_rule():
    """Under float_tol an integer expected value (stdout: a token written as an integer) is matched only by an output
    exactly equal to it, at any size; the tolerance is for the others; a non-finite output matches no finite value."""
    big = "1" * 5000  # past int()'s 4300-digit limit: no float fallback may turn it into inf
    for actual in ("999999000", "999999000.0", "9.99999e8", "3" * 5000, "inf", "1e9999", "nan", "sNaN"):
        assert not stdout_matches(actual, "999999937", float_tol=1e-6), actual
        assert not stdout_matches(actual, big, float_tol=1e-6), actual
    assert stdout_matches(big + ".0", big, float_tol=1e-6) and stdout_matches("9.99999937e8", "999999937", 1e-6)
    assert stdout_matches("2.0000001", "2.0", float_tol=1e-6)  # `2.0` is not an integer token: tolerance
    assert not stdout_matches("inf", "2.5", float_tol=1e-6) and not stdout_matches("nan", "2.5", float_tol=1e-6)
    for actual in (999999000, 999999000.0, 999999937.0000001, float("inf"), float("nan")):
        assert not values_match(actual, 999999937, float_tol=1e-6), actual
    assert values_match(10**400, 10**400, 1e-6) and not values_match(10**400 + 1, 10**400, 1e-6)
    assert values_match(2.5000001, 2.5, 1e-6) and not values_match(float("inf"), 2.5, 1e-6)
    assert not values_match(10**400, 2.5, 1e-6)


def test_values_match_rules():
    assert values_match([1, (2, 3)], [1, [2, 3]])
    assert values_match({1: "a"}, {"1": "a"})  # JSON object keys are strings
    assert not values_match(3.0, 3) and not values_match(3, 3.0)
    assert values_match(3.0, 3, float_tol=1e-9)
    assert not values_match(True, 1) and not values_match(1, True)
    assert not values_match({1, 2}, [1, 2])
    assert not values_match([1, 2], [1, 2, 3])


# -- codec ------------------------------------------------------------------------------------------------

_plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(_plain)
def test_codec_round_trips_through_json(value):
    back = decode_value(json.loads(json.dumps(encode_value(value))))
    assert back == value and type(back) is type(value)


def test_codec_special_values():
    for v in (float("inf"), -float("inf"), 10**400, -(10**30), 1 + 2j, frozenset({1, (2, 3)}), {1, 2}):
        assert decode_value(json.loads(json.dumps(encode_value(v)))) == v
    assert math.isnan(decode_value(encode_value(float("nan"))))


def test_codec_reduces_builtin_subclasses_and_rejects_objects():
    class Eq(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    out = encode_value(Eq(5))
    assert out == 5 and type(out) is int
    with pytest.raises(NotPlainData):
        encode_value(object())
    with pytest.raises(NotPlainData):
        encode_value(x for x in range(3))
    nested: list = []
    for _ in range(100):
        nested = [nested]
    with pytest.raises(NotPlainData):
        encode_value(nested)


@pytest.mark.parametrize("bad", [{"$": "tuple"}, {"$": "weird", "v": []}, {"$": "int", "v": 3}, {"a": 1}])
def test_decoder_rejects_malformed(bad):
    with pytest.raises(ValueError):
        decode_value(bad)


# -- assert planning --------------------------------------------------------------------------------------


def test_plan_runs_every_statement_test_side_and_scores_top_level_asserts():
    plan = plan_asserts(
        "expected = [1, 2, 3]\ndata = [3, 1, 2]\nassert sort_it(data) == expected\n"
        "assert abs(area(2) - 12.566) < 1e-3\nassert True\nassert sorted(f(3)) == [1, 2, 3]"
    )
    assert plan.steps == (
        ("expected = [1, 2, 3]", -1),
        ("data = [3, 1, 2]", -1),
        ("assert sort_it(data) == expected", 0),
        ("assert abs(area(2) - 12.566) < 0.001", 1),
        ("assert sorted(f(3)) == [1, 2, 3]", 2),  # `assert True` tests nothing about the solution: not run
    )
    assert plan.solution_names == ("area", "f", "sort_it") and len(plan.units) == 3
    assert plan.probes == ()  # nothing the tests compute is evaluated in the solution's process


def test_plan_lifts_humaneval_check_function():
    tests = (
        "METADATA = {}\n\ndef check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n"
    )
    plan = plan_asserts(tests, "total")
    assert plan.units == ("assert candidate([1, 2]) == 3", "assert candidate([]) == 0")
    assert ("candidate = total", -1) in plan.steps and plan.solution_names == ("total",)
    with pytest.raises(UnsupportedTests):
        plan_asserts(tests)


def test_plan_counts_asserts_on_values_computed_from_the_solution():
    plan = plan_asserts(
        "candidate = f\nres = candidate(3)\nassert res == 9\nassert [f(i) for i in range(3)] == [0, 2, 4]"
    )
    assert plan.units == ("assert res == 9", "assert [f(i) for i in range(3)] == [0, 2, 4]")


def test_plan_imports_stdlib_modules_used_by_tests():
    plan = plan_asserts("assert math.isclose(area(1), 3.14159, rel_tol=1e-3)")
    assert plan.steps[0] == ("import math", -1) and plan.solution_names == ("area",)


def test_plan_leaves_names_the_tests_import_to_the_tests():
    """A star import or an import inside a block binds names at run time in the oracle: `isclose` is stubbed, then
    rebound to math's by the import, never taken from the solution."""
    plan = plan_asserts("if True:\n    from math import isclose\nassert isclose(area(2), 12.566, rel_tol=1e-3)")
    assert plan.solution_names == ("area",)
    star = plan_asserts("from math import *\nassert isclose(area(2), 12.566, rel_tol=1e-3)")
    assert star.steps[0] == ("from math import *", -1)


@pytest.mark.parametrize(
    "tests",
    [
        "x = 1",
        "def t():\n    assert f(1)",  # never called: it would pass every program
        "assert (",
        "assert True",  # tests nothing about the solution
        "assert 1 + 1 == 2\nx = f",
        "for i in range(3):\n    assert i == i",
        "def check(candidate):\n    for i in range(3):\n        assert candidate(i) == i",  # no entry point
    ],
)
def test_plan_rejects_unsupported(tests):
    with pytest.raises(UnsupportedTests):
        plan_asserts(tests)


@pytest.mark.parametrize(
    ("tests", "names"),
    [
        ("for i in range(3):\n    assert f(i) == i", ("f",)),
        ("def helper(x):\n    assert f(x) == 3\nhelper(1)", ("f",)),
        ("assert f(0) == 0\nfor i in range(3):\n    assert f(i) == i", ("f",)),
        ("for x in [1.0, 2.0]:\n    assert math.isclose(area(x), 3.14159 * x * x, rel_tol=1e-3)", ("area",)),
    ],
)
def test_plan_runs_tests_with_nested_asserts_as_one_program_test(tests, names):
    plan = plan_asserts(tests)
    assert plan.steps[-1] == (tests, 0) and plan.solution_names == names and len(plan.units) == 1


def test_plan_humaneval_check_with_a_loop_calls_check_on_the_entry_point():
    tests = (
        "METADATA = {}\n\ndef check(candidate):\n    import random\n    rng = random.Random(0)\n"
        "    for _ in range(5):\n        xs = [rng.randint(-9, 9) for _ in range(4)]\n"
        "        assert abs(poly(xs, candidate(xs))) < 1e-4\n"
    )
    plan = plan_asserts(tests, "find_zero")
    assert plan.steps[-1][0].rstrip().endswith("check(find_zero)") and len(plan.units) == 1
    assert plan.solution_names == ("find_zero", "poly")  # `poly` comes from the solution, as in HumanEval


def test_plan_counts_only_asserts_that_use_the_solution():
    tests = (
        "def check(candidate):\n    assert candidate(1) == 2\n"
        '    assert True, "This prints if this assert fails 1 (good for debugging!)"\n'
        "    assert candidate(2) == 4\n    assert 1 + 1 == 2\n"
    )
    plan = plan_asserts(tests, "double")
    assert plan.units == ("assert candidate(1) == 2", "assert candidate(2) == 4")


# -- TRL plumbing -----------------------------------------------------------------------------------------


def test_reward_is_picklable_named_and_validates_columns():
    reward = make_code_reward(partial_credit=True, timeout_s=2, name="unit_tests")
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.__name__ == "unit_tests" and clone.partial_credit
    assert code_reward.__name__ == "code_reward"
    with pytest.raises(MissingColumnError, match="unit_tests needs the unit tests"):
        reward(["x"])
    with pytest.raises(ValueError):
        reward(["x", "y"], tests=["assert f(1) == 1"])
    with pytest.raises(TypeError):
        make_code_reward(bogus_limit=3)


def test_reward_accepts_trl_keyword_arguments_and_dedupes_identical_completions(monkeypatch):
    import reward_funcs.code.reward as ct

    calls = []
    real = ct.run_parsed

    def counting(code, *a, **k):
        calls.append(code)
        return real(code, *a, **k)

    monkeypatch.setattr(ct, "run_parsed", counting)
    good = [{"role": "assistant", "content": "```python\ndef f(x):\n    return x + 1\n```"}]
    bad = [{"role": "assistant", "content": "```python\ndef f(x):\n    return x\n```"}]
    out = code_reward(
        completions=[good, good, bad, good],
        tests=["assert f(1) == 2"] * 4,
        prompts=["p"] * 4,
        completion_ids=[[1]] * 4,
        trainer_state=None,
        log_extra=None,
        log_metric=None,
    )
    assert out == [1.0, 1.0, 0.0, 1.0]
    assert len(calls) == 2


def test_run_code_tests_without_code_reports_skipped():
    r = run_code_tests(None, "assert f(1) == 2\nassert f(2) == 3")
    assert not r.code_found and [o.outcome for o in r.outcomes] == ["skipped", "skipped"] and r.fraction == 0.0


def test_sandbox_failure_gives_none_not_zero(monkeypatch):
    import reward_funcs.code.sandbox as sb

    def broken(*a, **k):
        raise RuntimeError("sandbox supervisor failed")

    monkeypatch.setattr(sb, "run_job", broken)
    reward = make_code_reward(name="broken_sandbox")
    with pytest.warns(RuntimeWarning, match="no verdict"):
        assert reward(["```python\ndef f(x):\n    return x\n```"], tests=["assert f(1) == 1"]) == [None]


def test_every_reward_name_of_the_cli_is_importable_from_reward_funcs():
    import reward_funcs
    from trl_dapo_ext.cli.train import REWARD_FUNCS

    for name, factory in REWARD_FUNCS.items():
        assert name in reward_funcs.__all__, name
        assert factory() is getattr(reward_funcs, name)
        assert getattr(reward_funcs, name).__name__ == name
    assert reward_funcs.code_reward_partial.partial_credit


def test_assert_plan_docstring_examples_run():
    import doctest

    from reward_funcs.code import asserts as _assert_plan

    assert doctest.testmod(_assert_plan).failed == 0
