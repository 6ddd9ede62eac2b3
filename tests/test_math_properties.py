"""Property tests for the math verifier (string-level paths only, so they stay fast)."""

from __future__ import annotations

import re
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from reward_funcs import answers_match, extract_final_answer
from reward_funcs.math.normalize import exact_value

# Filler that can never form an anchor: no "answer", "boxed", "fbox", "####", tags, braces or dollars.
filler = st.text(alphabet="bcdfghjklmpqtvxyz0123456789 .,+-=()\n", max_size=200)
answer_value = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.tuples(st.integers(-999, 999), st.integers(1, 999)).map(lambda t: f"\\frac{{{t[0]}}}{{{t[1]}}}"),
    st.sampled_from(["x^2+1", "\\sqrt{2}", "(1, 2]", "\\pi", "a_n", "3.25"]),
)
anchor = st.sampled_from(
    ["\\boxed{{{}}}", "$\\boxed{{{}}}$", "\\fbox{{{}}}", "<answer>{}</answer>", "\nAnswer: {}\n", "\n#### {}\n"]
)
SETTINGS = settings(max_examples=150, deadline=None)


@SETTINGS
@given(
    st.lists(st.tuples(filler, anchor, answer_value), min_size=1, max_size=5),
    filler,
)
def test_extract_returns_the_last_anchored_answer(chunks, tail):
    text = "".join(f + a.format(v) for f, a, v in chunks) + " " + tail
    last_value = chunks[-1][2]
    got = extract_final_answer(text)
    boxes = ("\\boxed", "$\\boxed", "\\fbox")
    # The trailing boxes written in one sentence (no sentence end with words in the filler between them) are one
    # hedged answer: every value is kept (a repeated value once), so the answer is more than the last value.
    run = [chunks[-1]]
    for prev, cur in zip(chunks[-2::-1], chunks[::-1], strict=False):
        separated = re.search(r"[.!?](?=\s|$)|\n", cur[0]) and re.search(r"[A-Za-z]{2,}", cur[0])
        if not (prev[1].startswith(boxes) and cur[1].startswith(boxes)) or separated:
            break
        run.append(prev)
    if len(run) > 1:
        assert got.endswith(last_value)
        assert (got == last_value) == all(c[2] == last_value for c in run)
        return
    assert got == last_value


@SETTINGS
@given(filler, answer_value, filler)
def test_reasoning_inside_think_never_counts(before, value, after):
    assert extract_final_answer(f"{before}<think>\\boxed{{{value}}}</think>{after}") is None
    assert extract_final_answer(f"<think>{before}\\boxed{{{value}}}") is None


@SETTINGS
@given(st.integers(0, 10**15))
def test_thousands_separators(n):
    assert answers_match(f"{n:,}", str(n))
    assert answers_match(str(n), f"{n:,}")
    assert not answers_match(f"{n + 1:,}", str(n))


def _forms(q: Fraction) -> list[str]:
    forms = [f"{q.numerator}/{q.denominator}", f"\\frac{{{q.numerator}}}{{{q.denominator}}}"]
    if q < 0:
        forms.append(f"-\\frac{{{-q.numerator}}}{{{q.denominator}}}")
    den = q.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    if den == 1:  # terminating decimal: its exact decimal form
        digits = 0
        while (q * 10**digits).denominator != 1:
            digits += 1
        forms.append(f"{float(q):.{digits}f}" if digits else str(q.numerator))
    return forms


@SETTINGS
@given(st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=2000))
def test_equivalent_numeric_forms_match_symmetrically(q):
    forms = _forms(q)
    for a in forms:
        assert exact_value(a) == q
        for b in forms:
            assert answers_match(a, b) and answers_match(b, a)


@SETTINGS
@given(st.fractions(max_denominator=10**6), st.fractions(max_denominator=10**6))
def test_different_numbers_never_match(p, q):
    if p != q:
        a, b = f"\\frac{{{p.numerator}}}{{{p.denominator}}}", f"{q.numerator}/{q.denominator}"
        assert not answers_match(a, b) and not answers_match(b, a)


@SETTINGS
@given(
    st.integers(-1000, 1000),
    st.integers(-1000, 1000),
    st.sampled_from(["{} or {}", "{}, {}", "\\boxed{{{}}} or \\boxed{{{}}}", "{} \\text{{ or }} {}"]),
)
def test_hedges_never_match_a_single_gold(a, b, template):
    if a != b:
        hedge = template.format(a, b)
        assert not answers_match(hedge, str(a)) and not answers_match(hedge, str(b))
