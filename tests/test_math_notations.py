"""Equal notations of one answer that the verifier accepts, and the near misses next to them that it rejects.

Each class of issue 33: inequality spellings and inequalities against intervals, matrices across environments,
several named answers, a named left side that is an expression, percent spellings. Every case is scored through
`math_reward` in three anchors (a box, a GSM8K `####` line, an `Answer:` line), all in one batch; the property
tests at the end draw their own values.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reward_funcs import answers_match, close_math_workers, math_reward

ANCHORS = {
    "boxed": "We simplify and check the constraints.\nSo the answer is $\\boxed{{{}}}$.",
    "####": "We simplify and check the constraints.\n#### {}",
    "answer line": "We simplify and check the constraints.\nAnswer: ${}$",
}

# (class, prediction, gold): equal notations, each must score 1.0 in every anchor.
ACCEPT = [
    ("inequality", r"x \geq 5", r"x >= 5"),
    ("inequality", r"x >= 5", r"x \ge 5"),
    ("inequality", r"x \le 2", r"x <= 2"),
    ("inequality", r"x \neq 3", r"x != 3"),
    ("inequality", r"x != 3", r"x \ne 3"),
    ("inequality", r"x \lt 3", r"x < 3"),
    ("inequality", r"x \gt 5", r"x > 5"),
    ("inequality", r"5 \le x", r"x \geq 5"),
    ("inequality", r"4 \geq y \geq -1", r"-1 \le y \le 4"),
    ("inequality vs interval", r"-1 \le y \le 4", r"y \in [-1, 4]"),
    ("inequality vs interval", r"y \in [-1, 4]", r"-1 \le y \le 4"),
    ("inequality vs interval", r"-1 \le y \le 4", r"[-1, 4]"),
    ("inequality vs interval", r"[-1, 4]", r"-1 \leq y \leq 4"),
    ("inequality vs interval", r"x \geq 5", r"[5, \infty)"),
    ("inequality vs interval", r"x > \frac{1}{2}", r"x \in \left(\frac{1}{2}, \infty\right)"),
    ("inequality vs interval", r"x \neq 3", r"(-\infty, 3) \cup (3, \infty)"),
    ("inequality vs interval", r"x \in (-\infty, 3) \cup (3, \infty)", r"x \neq 3"),
    ("inequality vs interval", r"x \ge \sqrt{2}", r"[\sqrt 2, \infty)"),
    ("matrix", r"\begin{bmatrix}1 & 0 \\ 0 & 1\end{bmatrix}", r"\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix}"),
    (
        "matrix",
        r"\left[\begin{array}{cc}1 & 2 \\ 3 & 4\end{array}\right]",
        r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}",
    ),
    ("matrix", r"\begin{pmatrix}1 \\ 2\end{pmatrix}", r"\left[\begin{array}{c}1 \\ 2\end{array}\right]"),
    ("matrix", r"\begin{pmatrix}0.5 \\ 0.25\end{pmatrix}", r"\begin{pmatrix}\frac{1}{2} \\ \frac{1}{4}\end{pmatrix}"),
    ("matrix", r"\begin{bmatrix}\frac{3}{4} & -1.5\end{bmatrix}", r"\begin{pmatrix}0.75 & -\frac32\end{pmatrix}"),
    ("named answers", r"t_{1}=3,\quad t_{2}=8", r"t_1 = 3, t_2 = 8"),
    ("named answers", r"t_1 = 3, t_2 = 8", r"t_{1}=3,\quad t_{2}=8"),
    ("named answers", r"t_2 = 8, t_1 = 3", r"t_1 = 3, t_2 = 8"),
    ("named answers", r"(3,4),(6,1)", r"a=3,b=4;a=6,b=1"),
    ("named answers", r"(6,1),(3,4)", r"a=3,b=4;a=6,b=1"),
    ("named answers", r"a=6,b=1;a=3,b=4", r"a=3,b=4;a=6,b=1"),
    ("named answers", r"b=4,a=3;b=1,a=6", r"a=3,b=4;a=6,b=1"),
    ("named answers", r"(3, 4)", r"x = 3, y = 4"),
    ("named answers", r"x_{1}=2,\quadx_{2}=5", r"x_1 = 2, x_2 = 5"),
    ("alternatives", r"(9,4),(4,9)", r"(4,9) or (9,4)"),
    ("alternatives", r"(4,9),\ (9,4)", r"(9,4)or(4,9)"),
    ("alternatives", r"(9,4) \text{ or } (4,9)", r"(4,9),(9,4)"),
    ("named expression", r"\frac{2}{\sqrt 3}", r"\frac{AB}{CD}=\frac{2}{\sqrt{3}}"),
    ("named expression", r"\frac{2\sqrt3}{3}", r"\frac{AB}{CD}=\frac{2}{\sqrt{3}}"),
    ("named expression", r"\frac{AB}{CD}=\frac{2}{\sqrt{3}}", r"\frac{2}{\sqrt 3}"),
    ("named expression", r"\dfrac{NO}{BO} = \frac{1}{\sqrt{6}}", r"\frac{\sqrt6}{6}"),
    ("percent", r"45\%", r"45\%"),
    ("percent", r"45 \%", r"45\%"),
    ("percent", r"45 percent", r"45\%"),
    ("percent", r"45 pct", r"45\%"),
    ("percent", r"45\,\%", r"45\%"),
]

# (class, prediction, gold): near misses, each must score 0.0 in every anchor.
REJECT = [
    ("inequality", r"x > 5", r"x \geq 5"),  # strict vs non-strict
    ("inequality", r"x \geq 6", r"x >= 5"),  # a different bound
    ("inequality", r"x \leq 5", r"x \geq 5"),  # the other direction
    ("inequality", r"y \geq 5", r"x \geq 5"),  # another variable
    ("inequality", r"x = 3", r"x \neq 3"),
    ("inequality", r"-1 < y \le 4", r"-1 \le y \le 4"),
    ("inequality vs interval", r"-1 < y \le 4", r"y \in [-1, 4]"),
    ("inequality vs interval", r"-1 \le y \le 5", r"[-1, 4]"),
    ("inequality vs interval", r"x > 5", r"[5, \infty)"),
    ("inequality vs interval", r"y \in (-1, 4]", r"-1 \le y \le 4"),
    ("inequality vs interval", r"x \neq 4", r"(-\infty, 3) \cup (3, \infty)"),
    # The inequality of the question is not its solution: only a solved form (a lone variable against numbers) is
    # read as a set (Math-Verify's README gives this reason for its asymmetric relation/set comparison).
    ("inequality vs interval", r"x^2 < 4", r"(-2, 2)"),
    ("inequality vs interval", r"x^2 < 4", r"-2 < x < 2"),
    ("inequality vs interval", r"2x + 1 \geq 11", r"[5, \infty)"),
    ("inequality vs interval", r"x \geq 5 \text{ or } x \leq 1", r"[5, \infty)"),
    ("matrix", r"\begin{pmatrix}1 & 2 \\ 3 & 5\end{pmatrix}", r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}"),
    ("matrix", r"\begin{pmatrix}2 \\ 1\end{pmatrix}", r"\begin{pmatrix}1 \\ 2\end{pmatrix}"),
    ("matrix", r"\begin{pmatrix}1 & 2\end{pmatrix}", r"\begin{pmatrix}1 \\ 2\end{pmatrix}"),
    ("matrix", r"\begin{pmatrix}1 \\ 2 \\ 3\end{pmatrix}", r"\begin{pmatrix}1 \\ 2\end{pmatrix}"),
    ("matrix", r"\begin{pmatrix}0.33 \\ 0.2\end{pmatrix}", r"\begin{pmatrix}\frac{1}{3} \\ \frac{1}{5}\end{pmatrix}"),
    ("matrix", r"\begin{pmatrix}0.333333 \\ 1\end{pmatrix}", r"\begin{pmatrix}\frac13 \\ 1\end{pmatrix}"),
    ("named answers", r"t_{1}=3,\quad t_{2}=9", r"t_1 = 3, t_2 = 8"),
    ("named answers", r"t_1 = 3", r"t_1 = 3, t_2 = 8"),  # a missing answer
    ("named answers", r"(4,3),(6,1)", r"a=3,b=4;a=6,b=1"),  # a swapped entry
    ("named answers", r"(3,4)", r"a=3,b=4;a=6,b=1"),  # a missing pair
    ("named answers", r"(3,4),(6,1),(1,6)", r"a=3,b=4;a=6,b=1"),  # an extra pair
    ("named answers", r"a=4,b=3;a=6,b=1", r"a=3,b=4;a=6,b=1"),
    ("named answers", r"a=3,c=4;a=6,c=1", r"a=3,b=4;a=6,b=1"),  # another name
    ("named answers", r"(4, 3)", r"x = 3, y = 4"),
    ("named answers", r"y = 3, x = 4", r"x = 3, y = 4"),
    ("alternatives", r"(4,9)", r"(4,9) or (9,4)"),  # one of two alternatives
    ("alternatives", r"(4,9),(9,5)", r"(4,9)or(9,4)"),
    ("named expression", r"\frac{2}{\sqrt 2}", r"\frac{AB}{CD}=\frac{2}{\sqrt{3}}"),
    ("named expression", r"\frac{CD}{AB}=\frac{2}{\sqrt{3}}", r"\frac{AB}{CD}=\frac{2}{\sqrt{3}}"),  # another name
    ("named expression", r"\frac{x+1}{2} = 3", r"3"),  # an equation, not a name
    ("percent", r"46\%", r"45\%"),
    ("percent", r"0.45", r"45\%"),  # no x100 leniency
    ("percent", r"4.5\%", r"45\%"),
    ("percent", r"45\%", r"0.45"),
]


def _completions(rows):
    texts, golds = [], []
    for _, pred, gold in rows:
        for template in ANCHORS.values():
            texts.append(template.format(pred))
            golds.append(f"${gold}$")
    return texts, golds


@pytest.fixture(scope="module")
def verdicts():
    """Every case in every anchor, scored in one batch: {(pred, gold): [score per anchor]}."""
    rows = ACCEPT + REJECT
    texts, golds = _completions(rows)
    scores = math_reward(texts, answer=golds)
    k = len(ANCHORS)
    yield {(p, g): scores[i * k : (i + 1) * k] for i, (_, p, g) in enumerate(rows)}
    close_math_workers()


def _ids(rows):
    return [f"{c}: {p} ~ {g}" for c, p, g in rows]


@pytest.mark.parametrize(("cls", "pred", "gold"), ACCEPT, ids=_ids(ACCEPT))
def test_equal_notations_are_accepted_in_every_anchor(verdicts, cls, pred, gold):
    assert verdicts[(pred, gold)] == [1.0] * len(ANCHORS), dict(zip(ANCHORS, verdicts[(pred, gold)], strict=True))


@pytest.mark.parametrize(("cls", "pred", "gold"), REJECT, ids=_ids(REJECT))
def test_near_misses_are_rejected_in_every_anchor(verdicts, cls, pred, gold):
    assert verdicts[(pred, gold)] == [0.0] * len(ANCHORS), dict(zip(ANCHORS, verdicts[(pred, gold)], strict=True))


def test_an_ambiguous_gold_with_words_between_its_boxes_is_skipped():
    # "\boxed{1} no, no ... \boxed{2}" reads as a correction or as two answers: neither reading is safe to pay for.
    gold = r"It is \boxed{1} no no wait \boxed{2}"
    assert math_reward([r"\boxed{1, 2}", r"\boxed{2}"], solution=[gold, gold]) == [None, None]
    # Connectives still join the boxes of one answer, with words around them.
    assert math_reward([r"\boxed{2, 3}"], solution=[r"The roots are \boxed{2} and \boxed{3}."]) == [1.0]
    assert math_reward([r"\boxed{1, 2}"], solution=[r"\boxed{1} cats and \boxed{2} dogs"]) == [1.0]


def test_an_inequality_copied_from_the_prompt_is_no_answer():
    # Equal as sets, but "write it in interval notation" is not answered by restating the question.
    answer = r"So $\boxed{-2 \le x \le 7}$."
    prompts = [
        r"Write $-2 \le x \le 7$ in interval notation.",
        [{"role": "user", "content": r"Write $-2 \leq x \leq 7$ in interval notation."}],
        r"Solve $|2x - 5| \le 9$.",
    ]
    assert math_reward([answer] * 3, answer=["[-2, 7]"] * 3, prompts=prompts) == [0.0, 0.0, 1.0]


def test_words_compare_as_text_never_as_products_of_symbols():
    # sympy reads `yes` as y*e*s, so an anagram was "equal"; words are compared as written (case aside).
    assert not answers_match("sey", r"\text{yes}") and not answers_match("neve", "even")
    assert answers_match(r"\text{Odd}", "odd") and answers_match("no solution", r"\text{no solution}")
    # A gold that is one \text{...} group is a text answer, not a prose solution without an answer.
    gold = r"$$\text{The midpoints form a regular hexagon}$$"
    right, wrong = (
        r"\boxed{\text{The midpoints form a regular hexagon}}",
        r"\boxed{\text{The hexagon form a regular midpoints}}",
    )
    assert math_reward([right, wrong], answer=[gold, gold]) == [1.0, 0.0]


def test_quotes_around_the_final_answer_are_not_part_of_it():
    assert math_reward(['The final answer is "12 and 13".'], answer=[r"\boxed{12\text{ and }13}"]) == [1.0]


def test_a_leading_zero_group_is_not_a_thousands_separator():
    assert not answers_match("111", "0,111")
    assert answers_match("1000", "1,000")


# ----- properties (each example goes through the symbolic worker: few examples, no deadline) -----

SETTINGS = settings(max_examples=25, deadline=None)
bound = st.fractions(min_value=-50, max_value=50, max_denominator=7)
LE = [r"\le", r"\leq", "<="]
GE = [r"\ge", r"\geq", ">="]


def _num(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


@SETTINGS
@given(bound, bound, st.sampled_from("xyt"), st.sampled_from(LE), st.sampled_from(GE), st.booleans())
def test_a_solved_double_inequality_equals_its_interval(a, b, var, le, ge, flipped):
    if a == b:
        return
    lo, hi = sorted((a, b))
    chain = f"{_num(hi)} {ge} {var} {ge} {_num(lo)}" if flipped else f"{_num(lo)} {le} {var} {le} {_num(hi)}"
    interval = f"[{_num(lo)}, {_num(hi)}]"
    assert answers_match(chain, f"{var} \\in {interval}") and answers_match(f"{var} \\in {interval}", chain)
    assert answers_match(chain, interval)
    assert not answers_match(chain, f"[{_num(lo)}, {_num(hi)})")  # strict vs non-strict
    assert not answers_match(chain, f"[{_num(lo)}, {_num(hi + 1)}]")  # another bound


@SETTINGS
@given(st.lists(st.fractions(min_value=-9, max_value=9, max_denominator=4), min_size=2, max_size=4), st.data())
def test_a_vector_in_any_environment_equals_itself_and_no_other(entries, data):
    def decimal_or_frac(q: Fraction) -> str:
        return data.draw(st.sampled_from([_num(q), f"{float(q):g}"])) if 100 % q.denominator == 0 else _num(q)

    rows = r" \\ ".join(decimal_or_frac(q) for q in entries)
    env = data.draw(st.sampled_from(["pmatrix", "bmatrix"]))
    pred = data.draw(
        st.sampled_from(
            [f"\\begin{{{env}}}{rows}\\end{{{env}}}", f"\\left[\\begin{{array}}{{c}}{rows}\\end{{array}}\\right]"]
        )
    )
    gold = r"\begin{pmatrix}" + r" \\ ".join(_num(q) for q in entries) + r"\end{pmatrix}"
    assert answers_match(pred, gold)
    i = data.draw(st.integers(0, len(entries) - 1))
    changed = entries[:i] + [entries[i] + 1] + entries[i + 1 :]
    assert not answers_match(r"\begin{pmatrix}" + r" \\ ".join(_num(q) for q in changed) + r"\end{pmatrix}", gold)


@SETTINGS
@given(st.lists(st.tuples(st.integers(-20, 20), st.integers(-20, 20)), min_size=1, max_size=3, unique=True), st.data())
def test_named_pairs_match_their_tuples_in_any_order(pairs, data):
    gold = ";".join(f"a={x},b={y}" for x, y in pairs)
    order = data.draw(st.permutations(pairs))
    assert answers_match(", ".join(f"({x},{y})" for x, y in order), gold)
    assert answers_match(";".join(f"b={y},a={x}" for x, y in order), gold)
    if any(x != y for x, y in pairs):
        assert not answers_match(", ".join(f"({y},{x})" for x, y in pairs), gold)
    if len(pairs) > 1:
        assert not answers_match(", ".join(f"({x},{y})" for x, y in pairs[1:]), gold)


@SETTINGS
@given(st.integers(0, 10**6), st.sampled_from([r"{}\%", r"{} \%", "{} percent", "${}$ %", r"{}\,\%"]))
def test_percent_spellings_are_the_same_number(n, form):
    text = f"Answer: {form.format(n)}"
    assert math_reward([text, text], answer=[f"${n}\\%$", f"${n + 1}\\%$"]) == [1.0, 0.0]
