"""Math verifier rewards: the labelled corpus (tests/data/math_cases.jsonl) and the public API."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

import reward_funcs
from reward_funcs import (
    FORMAT_REWARD_WEIGHT,
    answers_match,
    close_math_workers,
    extract_final_answer,
    make_math_format_reward,
    make_math_reward,
    math_format_reward,
    math_reward,
)

CASES = [json.loads(line) for line in (Path(__file__).parent / "data" / "math_cases.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module", autouse=True)
def _stop_workers():
    yield
    close_math_workers()


def _score(case: dict) -> float | None:
    return math_reward([case["completion"]], **{case["column"]: [case["gold"]]})[0]


# ----- corpus -----


def test_corpus_covers_every_policy_point():
    assert len(CASES) >= 80
    sections = {c["section"] for c in CASES}
    assert sections == {"anchor-", "gold-", "hedge-", "equiv-"}
    assert any(isinstance(c["completion"], list) for c in CASES)
    assert any(isinstance(c["completion"], str) for c in CASES)
    assert any("####" in c["gold"] for c in CASES), "a GSM8K solution gold"
    assert any("\\boxed" in c["gold"] and c["column"] == "solution" for c in CASES), "a MATH solution gold"
    assert {c["expected"] for c in CASES} == {0.0, 1.0, None}
    assert len({c["id"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"{c['id']}:{c['note']}" for c in CASES])
def test_corpus_case(case):
    assert _score(case) == case["expected"]


def test_hedge_section_has_zero_false_positives():
    hedges = [c for c in CASES if c["section"] == "hedge-"]
    rewards = math_reward([c["completion"] for c in hedges], answer=[c["gold"] for c in hedges])
    false_positives = [c["id"] for c, r in zip(hedges, rewards, strict=True) if r != 0.0]
    assert len(hedges) >= 30
    assert false_positives == []


def test_whole_corpus_in_one_batch_matches_case_by_case():
    # One call mixing every gold: exercises grouping, chunking over workers and the verdict cache.
    by_column = {"answer": [], "solution": []}
    for c in CASES:
        by_column[c["column"]].append(c)
    for column, cases in by_column.items():
        rewards = math_reward([c["completion"] for c in cases], **{column: [c["gold"] for c in cases]})
        assert rewards == [c["expected"] for c in cases]


def test_model_text_is_never_evaluated(tmp_path):
    target = tmp_path / "pwned"
    payloads = [
        rf"\boxed{{__import__('os').system('touch {target}')}}",
        rf"\boxed{{[open('{target}', 'w')]}}",
        rf"Answer: exec(\"open('{target}','w')\")",
        rf"\boxed{{\pi}} {{__import__('pathlib').Path('{target}').touch()}}",
    ]
    assert math_reward(payloads, answer=["0"] * len(payloads)) == [0.0] * len(payloads)
    assert not target.exists()


def test_docstring_examples_run():
    import doctest

    from reward_funcs.math import answers as math_answers
    from reward_funcs.math import forms as _math_forms
    from reward_funcs.math import normalize as _math_normalize
    from reward_funcs.math import verdicts as math_verdicts

    assert doctest.testmod(math_answers).failed == 0
    assert doctest.testmod(math_verdicts).failed == 0  # close_math_workers' example (it lived in answers.py before)
    assert doctest.testmod(_math_normalize).failed == 0
    assert doctest.testmod(_math_forms).failed == 0


# ----- the TRL reward-function contract -----


def test_missing_gold_column_names_the_columns_present():
    with pytest.raises(ValueError, match=r"columns present: \['difficulty', 'question'\]"):
        math_reward(["\\boxed{1}"], prompts=["p"], question=["q"], difficulty=[1], completion_ids=[[1]])
    with pytest.raises(ValueError, match="none"):
        math_reward(["\\boxed{1}"])


def test_gold_from_answer_column_then_solution():
    assert math_reward(["\\boxed{2}"], solution=["The sum is $\\boxed{2}$."]) == [1.0]
    # `answer` wins over `solution` when both are present.
    assert math_reward(["\\boxed{2}"], answer=["3"], solution=["\\boxed{2}"]) == [0.0]
    # A gold column explicitly set to None is "absent".
    assert math_reward(["\\boxed{2}"], answer=None, solution=["2"]) == [1.0]


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="2 completions but 1 gold"):
        math_reward(["\\boxed{1}", "\\boxed{2}"], answer=["1"])


def test_trainer_style_call_with_all_keyword_arguments():
    logged = {}
    completions = [
        [{"role": "assistant", "content": "<think>hmm</think> \\boxed{6}"}],
        [{"role": "assistant", "content": "5"}],
    ]
    out = math_reward(
        prompts=[[{"role": "user", "content": "2*3?"}]] * 2,
        completions=completions,
        completion_ids=[[1, 2], [3]],
        answer=[6, 6],  # non-string golds are fine
        trainer_state=None,
        log_extra=lambda column, values: logged.setdefault(column, values),
        log_metric=lambda name, value: None,
    )
    assert out == [1.0, 0.0]
    assert logged == {"math_answer": ["6", ""]}


def test_unparseable_gold_gives_none_for_the_whole_group():
    assert math_reward(["\\boxed{1}", "\\boxed{2}", "no answer"], answer=["\\frac{1}{"] * 3) == [None, None, None]
    assert math_reward(["\\boxed{1}"], answer=[None]) == [None]


def test_reward_objects_have_names_and_pickle():
    assert math_reward.__name__ == "math_reward"
    assert math_format_reward.__name__ == "math_format_reward"
    custom = make_math_reward(timeout_s=2, name="math_strict")
    assert custom.__name__ == "math_strict"
    clone = pickle.loads(pickle.dumps(custom))  # TRL's async rollout worker pickles reward functions
    assert clone.__name__ == "math_strict" and clone.timeout_s == 2.0
    assert clone(["\\boxed{\\frac{6}{8}}"], answer=["0.75"]) == [1.0]
    fmt = pickle.loads(pickle.dumps(make_math_format_reward(weight=0.05)))
    assert fmt(["<think>x</think> \\boxed{1}"]) == [0.05]


def test_reward_funcs_does_not_import_trl_dapo_ext():
    import subprocess
    import sys

    code = "import sys, reward_funcs; assert 'trl_dapo_ext' not in sys.modules; print('ok')"
    env = dict(os.environ, PYTHONPATH=str(Path(reward_funcs.__file__).parents[1]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_invalid_options_are_rejected():
    with pytest.raises(ValueError, match="timeout_s"):
        make_math_reward(timeout_s=0)
    with pytest.raises(ValueError, match="cannot outweigh"):
        make_math_format_reward(weight=1.0)
    with pytest.raises(ValueError, match="cannot outweigh"):
        make_math_format_reward(weight=-0.1)


# ----- extract_final_answer / answers_match -----


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"So $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed{3} or \boxed{4}", "3 or 4"),
        (r"\boxed{3}, \boxed{4}", "3, 4"),
        (r"\boxed{4} and again \boxed{4}", "4"),
        ("Answer: $3$ or $4$", "3 or 4"),
        ("The answer is $5$, since 2+3=5.", "5"),
        ("Final Answer: The final answer is $7$. I hope it is correct.", "7"),
        ("<answer> 12 </answer>", "12"),
        ("#### 1,000", "1,000"),
        (r"<think>\boxed{1}</think>", None),
        (r"<think>\boxed{1}", None),
        (r"\boxed{1", None),
        ("We get 12.", None),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": r"\boxed{9}"}], "9"),
    ],
)
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


def test_answers_match_examples():
    assert answers_match("1,000", "1000")
    assert answers_match(r"\frac{2}{4}", "0.5")
    assert answers_match("18", "She makes 9 * 2 = $18.\n#### 18")
    assert answers_match(r"\sqrt{12}", r"The side is $\boxed{2\sqrt3}$.")
    assert not answers_match("3 or 4", "4")
    assert not answers_match(None, "4")
    assert not answers_match("4", "")


def test_unanchored_fallback_is_opt_in():
    base = make_math_reward(unanchored_fallback=True, name="math_reward_base")
    assert math_reward(["3 + 4 = 7"], answer=["7"]) == [0.0]
    assert base(["3 + 4 = 7"], answer=["7"]) == [1.0]
    assert base(["The total is 1,000 apples"], answer=["1000"]) == [1.0]
    # The fallback never overrides an anchor, and never rescues an unclosed think.
    assert base(["\\boxed{6}. Some say 7"], answer=["7"]) == [0.0]
    assert base(["<think>3 + 4 = 7"], answer=["7"]) == [0.0]


# ----- format reward -----


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("<think>\n2+2\n</think>\nThe answer is $\\boxed{4}$.", True),
        ("<think>2+2</think><answer>4</answer>", True),
        ("2+2 is easy.</think> Answer: 4", True),  # `<think>` was in the prompt
        ("<think>2+2</think>", False),  # no answer after the reasoning
        ("<think>2+2</think> It is four.", False),
        ("\\boxed{4}", False),  # no reasoning block
        ("<think>a</think><think>b</think>\\boxed{4}", False),
        ("<think>2+2 \\boxed{4}", False),
        ("Hi <think>2+2</think> \\boxed{4}", False),
        ("<think>2+2</think> \\boxed{4", False),
    ],
)
def test_format_reward(text, ok):
    assert math_format_reward([text]) == [FORMAT_REWARD_WEIGHT if ok else 0.0]
    assert math_format_reward([[{"role": "assistant", "content": text}]]) == [FORMAT_REWARD_WEIGHT if ok else 0.0]


PLACEHOLDERS = [
    "number",
    "answer",
    "your answer",
    "",
    "...",
    "\\ldots",
    "\\text{answer}",
    "?",
    "\\text{your final answer}",
]
PLACEHOLDER_ANCHORS = [
    "$\\boxed{{{}}}$",
    "<answer>{}</answer>",
    "Answer: {}",
    "**Final Answer:** ${}$",
    "#### {}",
    "The final answer is {}.",
]


@pytest.mark.parametrize("anchor", PLACEHOLDER_ANCHORS)
@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_format_rewards_pay_nothing_for_a_placeholder(anchor, placeholder):
    # A policy learnt to write a literal `\boxed{number}` for the format bonus: only an answer that could be a value
    # (a digit, a math symbol, a lone variable or choice letter) is an answer.
    answer = anchor.format(placeholder)
    fmt = make_math_format_reward(require_think=False)
    assert fmt([answer]) == [0.0]
    assert math_format_reward([f"<think>Some work.</think>\n{answer}"]) == [0.0]
    assert reward_funcs.math_answer_format_reward([answer]) == [0.0]


@pytest.mark.parametrize(
    "value", ["4", "x", "C", "(C)", "\\frac{1}{2}", "5 \\text{ cm}", "\\infty", "\\emptyset", "x = 3", "-\\pi"]
)
def test_format_rewards_still_pay_for_a_value(value):
    for anchor in PLACEHOLDER_ANCHORS[:4]:
        assert reward_funcs.math_answer_format_reward([anchor.format(value)]) == [FORMAT_REWARD_WEIGHT], anchor


def test_format_cannot_outweigh_correctness():
    wrong_but_pretty = "<think>careful work</think> \\boxed{5}"
    right_but_plain = "\\boxed{4}"
    total = [
        c + f
        for c, f in zip(
            math_reward([wrong_but_pretty, right_but_plain], answer=["4", "4"]),
            math_format_reward([wrong_but_pretty, right_but_plain]),
            strict=True,
        )
    ]
    assert total[1] > total[0]
    assert FORMAT_REWARD_WEIGHT < 1.0
    assert make_math_format_reward(require_think=False)(["\\boxed{4}"]) == [FORMAT_REWARD_WEIGHT]


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        # A division by zero over a symbolic gold: the parser keeps (x + 1) / 0 unevaluated, still equal to nothing.
        (r"\frac{x+1}{0}", "x+1", False),
        (r"\frac{x}{2}/0", r"\frac{x}{2}", False),
        ("(x+1)/0", "x+1", False),
        (r"\frac{1}{x}", r"\frac{1}{x}", True),
        # Scale words are powers of ten, not units: "42 thousand" is 42000.
        (r"42 \text{ thousand}", "42", False),
        (r"42 \text{ thousand}", "42000", True),
        ("42 thousand", "42000", True),
        ("1.5 million", "1500000", True),
        ("3 hundred", "3", False),
        ("5 apples", "5", True),  # a unit word is still dropped
    ],
)
def test_zero_denominators_and_scale_words(prediction, gold, expected):
    assert answers_match(prediction, gold) is expected
