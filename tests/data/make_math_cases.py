"""Writes math_cases.jsonl: the labelled corpus for tests/test_math_rewards.py (edit here, then re-run this file).

Each case: id, section (anchor-/gold-/hedge-/equiv-), completion (plain or conversational), gold, the dataset column
it goes in, the expected reward (1.0, 0.0, or None for an unparseable gold) and a note.
"""

import json
from pathlib import Path

cases = []


def add(section, completion, gold, expected, note, conv=False, column="answer"):
    cases.append(
        dict(
            id=f"{section}{len([c for c in cases if c['section'] == section]) + 1:02d}",
            section=section,
            completion=[{"role": "assistant", "content": completion}] if conv else completion,
            gold=gold,
            column=column,
            expected=expected,
            note=note,
        )
    )


# ---- anchors: what counts as the final answer (policy 1)
A = "anchor-"
add(A, r"We add them. The total is $\boxed{18}$.", "18", 1.0, "boxed")
add(A, r"Total: \fbox{18}", "18", 1.0, "fbox")
add(
    A,
    r"First guess \boxed{17}. Wait, I made an error; recomputing gives \boxed{18}.",
    "18",
    1.0,
    "self-correction: last box wins",
)
add(
    A,
    r"First guess \boxed{18}. Wait, I made an error; recomputing gives \boxed{17}.",
    "18",
    0.0,
    "self-correction away from gold: last box wins",
)
add(A, r"So we get \boxed{18", "18", 0.0, "unclosed box is no answer")
add(
    A,
    r"Earlier \boxed{18}. Now the final one is \boxed{1",
    "18",
    0.0,
    "a later unclosed box is the last anchor: no answer",
)
add(A, "<answer>18</answer>", "18", 1.0, "answer tag")
add(A, "<answer>18", "18", 0.0, "unclosed answer tag")
add(A, r"<answer>It is \boxed{17}... no, \boxed{18}</answer>", "18", 1.0, "box inside answer tag")
add(A, "Natalia sold 48/2 = 24 clips in May.\n48 + 24 = 72\n#### 72", "72", 1.0, "GSM8K #### line")
add(A, "Reasoning...\nAnswer: 72", "72", 1.0, "Answer: line")
add(A, "Reasoning...\n**Final Answer:** 72", "72", 1.0, "markdown Final Answer line")
add(A, "Reasoning...\n**Answer**: $72$", "72", 1.0, "markdown bold label, colon outside")
add(A, "Reasoning...\nFinal Answer:\n72", "72", 1.0, "Final Answer: with the value on the next line")
add(A, "So the answer is 72.", "72", 1.0, "the answer is X")
add(A, "Therefore, the final answer is $72$. I hope it is correct.", "72", 1.0, "Minerva template")
add(
    A, "Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac34", 1.0, "Minerva with label"
)
add(A, "She has 72 apples in total.", "72", 0.0, "no anchor: a number that merely appears gets nothing")
add(
    A, "The numbers 72 and 5 appear here but nothing is stated as the answer.", "72", 0.0, "unanchored mention of gold"
)
add(A, r"<think>It could be \boxed{72}.</think>", "72", 0.0, "box only inside think does not count")
add(A, r"<think>It could be \boxed{70}.</think> The answer is \boxed{72}.", "72", 1.0, "answer after think")
add(
    A,
    r"<think>It could be \boxed{72}.</think> The answer is \boxed{70}.",
    "72",
    0.0,
    "gold inside think, wrong answer after",
)
add(A, r"<think>Let me compute. The answer is \boxed{72}", "72", 0.0, "unclosed think gets 0")
add(A, r"Let me compute 70+2.</think> So \boxed{72}.", "72", 1.0, "opening think tag in the prompt (chat template)")
add(A, r"\boxed{72} <think>on second thought", "72", 0.0, "unclosed think after the answer")
add(A, r"The answer is \boxed 72", "72", 1.0, "\\boxed without braces")
add(A, "Answer: 72\nAnswer: 73", "72", 0.0, "last Answer: line wins")
add(
    A,
    r"\boxed{72}. Let me double check that the answer is right. Yes.",
    "72",
    1.0,
    "'the answer is right' is not an answer",
)
add(A, "#### Step 1\nWe compute.\n#### 72", "72", 1.0, "markdown heading is not a #### answer")
add(A, r"\boxed{72}", "72", 1.0, "conversational completion", conv=True)
add(A, r"Answer: 72", "72", 1.0, "conversational Answer line", conv=True)
add(A, r"<think>maybe 70</think>\nThe answer is $\boxed{72}$", "72", 1.0, "conversational with think", conv=True)
add(A, r"\boxed{}", "72", 0.0, "empty box")

# issue 17: a new sentence with words between two boxes is still a self-correction (the last box wins)
add(A, "\\boxed{17}.\n\nWait, that is wrong: \\boxed{18}", "18", 1.0, "self-correction after a paragraph break")
add(A, r"\boxed{17}! No, I dropped a sign. \boxed{18}", "18", 1.0, "self-correction after an exclamation")
add(A, r"$\boxed{18}$. Let me recheck: yes, it is $\boxed{18}$.", "18", 1.0, "the same box twice across sentences")

# ---- gold formats (policy 2)
G = "gold-"
add(G, r"\boxed{18}", "Janet sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\n#### 18", 1.0, "GSM8K solution gold")
add(
    G,
    r"\boxed{19}",
    "Janet sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\n#### 18",
    0.0,
    "GSM8K solution gold, wrong",
)
add(
    G,
    r"\boxed{\frac{1}{2}}",
    r"The probability is $\frac{3}{6} = \boxed{\frac{1}{2}}$.",
    1.0,
    "MATH solution gold",
    column="solution",
)
add(
    G,
    r"\boxed{0.5}",
    r"The probability is $\frac{3}{6} = \boxed{\frac{1}{2}}$.",
    1.0,
    "MATH gold, decimal prediction",
    column="solution",
)
add(
    G,
    r"\boxed{\frac{1}{3}}",
    r"The probability is $\frac{3}{6} = \boxed{\frac{1}{2}}$.",
    0.0,
    "MATH gold, wrong",
    column="solution",
)
add(G, r"\boxed{\frac12}", r"\frac{1}{2}", 1.0, "raw LaTeX gold")
add(G, r"\boxed{18}", "18", 1.0, "raw integer gold")
add(G, r"\boxed{18}", "$18$", 1.0, "raw gold in dollars-math")
add(
    G,
    r"\boxed{(-\infty, 3]}",
    r"Solving gives $x \le 3$, so the answer is $\boxed{(-\infty,3]}$.",
    1.0,
    "MATH interval gold",
    column="solution",
)
add(G, r"\boxed{18}", "", None, "empty gold is unparseable -> None")
add(G, r"\boxed{18}", r"\boxed{18", None, "gold with an unclosed box -> None")
add(G, r"\boxed{18}", r"\frac{1}{", None, "gold that sympy cannot parse -> None")
add(
    G,
    r"\boxed{6}",
    "We multiply the two numbers and then add the remainder to get six.",
    None,
    "prose gold without an anchor -> None",
    column="solution",
)
add(G, r"\boxed{6}", r"\text{six apples}", 0.0, "short text gold is still a gold")
add(
    G, r"\boxed{5}", "The total is $5$ so we write \\boxed{5} and also $\\boxed{5}$.", 1.0, "gold with two equal boxes"
)
add(
    G,
    r"\boxed{2, 3}",
    "The roots are $\\boxed{2}$ and $\\boxed{3}$.",
    1.0,
    "gold listing two boxed roots",
    column="solution",
)

# issue 17: MATH number formats and answer shapes in solution golds
add(
    G,
    r"\boxed{10000}",
    r"The total is $\boxed{10,\!000}$.",
    1.0,
    "MATH ,\\! thousands in a solution",
    column="solution",
)
add(
    G,
    r"\boxed{\frac{1+\sqrt5}{2}, \frac{1-\sqrt5}{2}}",
    r"By the quadratic formula, $x = \boxed{\frac{1 \pm \sqrt{5}}{2}}$.",
    1.0,
    "\\pm inside a fraction in a solution gold (was None)",
    column="solution",
)
add(
    G,
    r"\boxed{\frac{1+\sqrt5}{2}}",
    r"By the quadratic formula, $x = \boxed{\frac{1 \pm \sqrt{5}}{2}}$.",
    0.0,
    "one root of a \\pm solution gold",
    column="solution",
)
add(
    G, r"\boxed{(3, 2)}", r"Hence $\boxed{(p,q)=(3,2)}$.", 1.0, "named left side in a solution gold", column="solution"
)
add(
    G,
    r"\boxed{(6, 2)} \text{ and } \boxed{(2, 2)}",
    r"The solutions are $\boxed{(2, 2)}$ and $\boxed{(6, 2)}$.",
    1.0,
    "several boxes against a gold of several boxes",
    column="solution",
)
add(G, r"\boxed{1}", r"\frac3{3}", 1.0, "shorthand \\frac3{3} gold")
add(G, r"\boxed{12:00}", "12:00", 1.0, "clock time gold, same text")
add(G, r"\boxed{(\frac{1}{0}, 2)}", r"(\frac{2}{0}, 2)", None, "zero denominator inside a tuple gold -> None")

# ---- hedges and adversarial answers (policy 3 + 4 negatives): zero false positives allowed
H = "hedge-"
add(H, "Answer: 3 or 4", "4", 0.0, "disjunction")
add(H, r"The answer is $3$ or $4$.", "4", 0.0, "disjunction in math mode")
add(H, r"\boxed{3 \text{ or } 4}", "4", 0.0, "\\text{or} in a box")
add(H, r"\boxed{3 \lor 4}", "4", 0.0, "\\lor in a box")
add(H, r"\boxed{3} or \boxed{4}", "4", 0.0, "two boxes joined by or")
add(H, r"\boxed{3}\boxed{4}", "4", 0.0, "two adjacent boxes")
add(H, r"$\boxed{3}$, $\boxed{4}$", "4", 0.0, "two boxes separated by a comma")
add(H, r"Answer: 3 or \boxed{4}", "4", 0.0, "box inside a hedged Answer line")
add(H, r"\boxed{\pm 3}", "3", 0.0, "\\pm against a single value")
add(H, r"\boxed{x = \pm 3}", "3", 0.0, "x = \\pm 3 against a single value")
add(H, r"\boxed{3, 4}", "4", 0.0, "list against a single value")
add(H, r"\boxed{\{3, 4\}}", "4", 0.0, "set against a single value")
add(H, r"\boxed{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}", "4", 0.0, "enumeration")
add(H, r"\boxed{x = 3 \text{ or } x = 4}", "4", 0.0, "disjunction of equations")
add(H, r"\boxed{7 = 5}", "5", 0.0, "equation whose sides disagree")
add(H, r"\boxed{4 = 5}", "4", 0.0, "equation whose sides disagree (gold on the left)")
add(H, r"\boxed{x = 5 = 6}", "5", 0.0, "chain that disagrees")
add(H, r"\boxed{3.14}", r"\pi", 0.0, "decimal approximation of pi")
add(H, r"\boxed{3.141592653589793}", r"\pi", 0.0, "16-digit approximation of pi")
add(H, r"\boxed{1.4142}", r"\sqrt{2}", 0.0, "decimal approximation of a surd")
add(H, r"\boxed{0.333333}", r"\frac{1}{3}", 0.0, "rounded fraction")
add(H, r"\boxed{100001}", "100000", 0.0, "relative tolerance must not apply")
add(H, r"\boxed{0.5}", r"50\%", 0.0, "no x100 percent leniency")
add(H, r"\boxed{5000}", r"50\%", 0.0, "no /100 percent leniency")
add(H, r"\boxed{\frac{1}{2^{99}}}", r"\frac{1}{2^{98}}", 0.0, "tiny values are compared exactly")
add(H, r"\boxed{0.0009}", "0.0001", 0.0, "small decimals are not collapsed")
add(H, r"\boxed{10^{-11}}", "10^{-10}", 0.0, "small powers of ten")
add(H, r"\boxed{[1, 2]}", "[1, 2)", 0.0, "interval brackets matter")
add(H, r"\boxed{(2, 1)}", "(1, 2)", 0.0, "tuple order matters")
add(H, r"\boxed{(\sqrt{2}, 3)}", r"(\sqrt{2}, 3]", 0.0, "symbolic interval: brackets matter")
add(H, r"\boxed{(\pi, 2)}", r"(2, \pi)", 0.0, "symbolic tuple: order matters")
add(H, r"\boxed{(1, 2, 3)}", "(1, 2)", 0.0, "tuple length matters")
add(H, r"\boxed{x}", "4", 0.0, "a bare variable")
add(H, r"\boxed{\text{the correct answer}}", "4", 0.0, "words")
add(H, "Answer: correct", "4", 0.0, "prompt-injection style answer")
add(H, r"\boxed{__import__('os').system('touch /tmp/rf_math_pwned')}", "0", 0.0, "code is never evaluated")
add(H, r"\boxed{4} is what a careless solver writes; the answer is 5.", "4", 0.0, "a later 'the answer is' overrides")
add(H, r"\boxed{1,2}", "12", 0.0, "comma is not a thousands separator unless it groups three digits")
add(H, r"\boxed{5} apples, or maybe \boxed{6}", "5", 0.0, "words between boxes in one sentence: still a hedge")
add(H, r"<answer>3</answer> <answer>4</answer>", "3", 0.0, "last answer tag wins")
add(H, r"\boxed{4}", "4.5", 0.0, "integer vs decimal gold")
add(H, r"\boxed{-4}", "4", 0.0, "sign matters")
add(H, r"\boxed{2x+2}", "2x+1", 0.0, "different expression")
add(H, r"\boxed{x^2 - 1 = 0}", "x^2+1=0", 0.0, "different equation")

# issue 17: a hedge is a hedge however the boxes are separated
add(H, r"\boxed{3} \quad \text{or} \quad \boxed{4}", "4", 0.0, "boxes joined by \\quad \\text{or} \\quad")
add(H, r"\boxed{3}, \quad \boxed{4}", "4", 0.0, "boxes joined by a comma and \\quad")
add(H, r"\boxed{3} \; \text{or} \; \boxed{4}", "4", 0.0, "boxes joined by \\; \\text{or} \\;")
add(H, r"\boxed{3} \text{ for part (a) and } \boxed{4}", "4", 0.0, "boxes joined by \\text with any words")
add(H, r"$\boxed{3}$ \qquad $\boxed{4}$", "3", 0.0, "boxes joined by \\qquad outside math")
add(H, r"\[ \boxed{3} \\ \boxed{4} \]", "4", 0.0, "boxes on two lines of one display")
add(H, "$$\\boxed{3}$$\n$$\\boxed{4}$$", "4", 0.0, "boxes on consecutive lines, nothing between")
add(H, r"\boxed{3} or perhaps \boxed{4}", "4", 0.0, "boxes joined by words in the same sentence")
add(H, r"\boxed{3} is one answer and \boxed{4} is another", "4", 0.0, "the word 'answer' between boxes is no anchor")
add(H, r"\boxed{3} \text{. Otherwise, } \boxed{4}", "4", 0.0, "sentence end inside \\text is still one answer")
add(H, r"\boxed{3}~\mathrm{or}~\boxed{4}", "4", 0.0, "boxes joined by ~\\mathrm{or}~")
add(H, r"\boxed{3} \hspace{1em} \boxed{4}", "4", 0.0, "boxes joined by \\hspace")
add(H, r"\boxed{3}; \boxed{4}", "3", 0.0, "boxes joined by a semicolon, gold first")
add(H, r"\boxed{3} \text{ or } \boxed{4} \text{ or } \boxed{5}", "5", 0.0, "three boxes")
add(H, r"\boxed{0.5} \text{ or } \boxed{0.50001}", "0.5", 0.0, "a value and a near value are two values")
add(
    H,
    r"\boxed{(2, 2)} \quad \text{and} \quad \boxed{(6, 2)}",
    "(2, 2), (6, 2), (1, 1)",
    0.0,
    "several boxes missing one of the gold answers",
)
add(
    H,
    r"\boxed{(2, 2)} \text{ and } \boxed{(6, 2)} \text{ and } \boxed{(7, 7)}",
    "(2, 2), (6, 2)",
    0.0,
    "several boxes with one answer too many",
)
# zero denominators never compare equal
add(H, r"\boxed{1:00}", "12:00", 0.0, "clock times are not ratios with a zero denominator")
add(H, r"\boxed{\frac{2}{0}}", r"\frac{1}{0}", 0.0, "two fractions over zero")
add(H, r"\boxed{2/0}", "1/0", 0.0, "two slashes over zero")
add(H, r"\boxed{0/0}", "1/0", 0.0, "0/0 against 1/0")
add(H, r"\boxed{3:0}", "1:0", 0.0, "ratios with a zero second term")
add(H, r"\boxed{\frac{5}{0}}", r"\infty", 0.0, "division by zero is not infinity")
add(H, r"\boxed{\frac{x}{0}}", r"\frac{1}{0}", 0.0, "symbolic numerator over zero")
# thousands separators are one number, not a list
add(H, r"\boxed{10,\!001}", r"10,\!000", 0.0, "a different number with ,\\! separators")
add(H, r"\boxed{10,\!000}", "10", 0.0, "10,\\!000 is not the list 10, 000")
add(H, r"\boxed{1,\!2}", "12", 0.0, ",\\! not grouping three digits is no thousands separator")
# named left sides
add(H, r"\boxed{(2,3)}", "(p,q)=(3,2)", 0.0, "named tuple gold: order still matters")
add(H, r"\boxed{(q,p)=(3,2)}", "(p,q)=(3,2)", 0.0, "other names on the left")
add(H, r"\boxed{5}", "x+y=5", 0.0, "a sum on the left is an equation, not a name")
add(H, r"\boxed{2}", "|AB|=1", 0.0, "named length, wrong value")
# \pm golds
add(H, r"\boxed{\frac{1 \pm \sqrt{5}}{2}}", r"\frac{1+\sqrt{5}}{2}", 0.0, "\\pm in a fraction against one root")
add(H, r"\boxed{2 \pm \sqrt{3}}", r"2+\sqrt{3}", 0.0, "\\pm against one root")
add(H, r"\boxed{\frac{-1 \mp \sqrt{2}}{3}}", r"\frac{-1+\sqrt{2}}{3}", 0.0, "\\mp against one root")
# \frac shorthand
add(
    H,
    r"\boxed{\sqrt[3]{\sqrt{2}+\sqrt[3]{3}}}",
    r"\sqrt[3]{\sqrt[3]{3}+\sqrt{3}}",
    0.0,
    "nested radical, one leaf differs",
)
add(H, r"\boxed{\frac3{4}}", "1", 0.0, "\\frac3{4} is not 1")
add(H, r"\boxed{\frac34}", r"\frac{4}{3}", 0.0, "\\frac34 is three quarters")
add(H, r"\boxed{\frac{3}4}", r"\frac{3}{5}", 0.0, "\\frac{3}4 is three quarters")

# ---- equivalence positives (policy 4)
E = "equiv-"
add(E, r"\boxed{1,000}", "1000", 1.0, "thousands separator")
add(E, r"\boxed{1{,}000{,}000}", "1000000", 1.0, "LaTeX thousands separator")
add(E, "Answer: $1,234.50", "1234.5", 1.0, "currency, separator, trailing zero")
add(E, r"\boxed{\$18.00}", "18", 1.0, "escaped dollar")
add(E, "The answer is 18 dollars.", "18", 1.0, "unit word")
add(E, r"\boxed{5\text{ cm}^2}", "5", 1.0, "LaTeX unit with exponent")
add(E, r"\boxed{45^\circ}", "45", 1.0, "degree sign")
add(E, r"\boxed{45°}", r"45^{\circ}", 1.0, "unicode degree sign")
add(E, r"\boxed{50\%}", "50", 1.0, "percent sign")
add(E, r"\boxed{50}", r"50\%", 1.0, "percent sign in gold")
add(E, r"\boxed{\frac{2}{4}}", "0.5", 1.0, "fraction vs decimal")
add(E, r"\boxed{\dfrac{1}{2}}", r"\frac12", 1.0, "dfrac and short frac")
add(E, r"\boxed{-\frac{1}{2}}", r"\frac{-1}{2}", 1.0, "sign placement")
add(E, r"\boxed{2\sqrt{2}}", r"\sqrt{8}", 1.0, "surd simplification")
add(E, r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", 1.0, "rationalised denominator")
add(E, r"\boxed{x = 5}", "5", 1.0, "variable assignment")
add(E, r"\boxed{5 = 4 + 1}", "5", 1.0, "equation whose sides agree")
add(E, r"\boxed{y = 3 + 2x}", "y = 2x + 3", 1.0, "equation gold, reordered")
add(E, r"\boxed{x^2+y^2=1}", "y^2 + x^2 = 1", 1.0, "genuine equation")
add(E, r"\boxed{\left(-\infty, 3\right]}", "(-\\infty, 3]", 1.0, "interval with \\left/\\right")
add(E, r"\boxed{(1,2)}", "(1, 2)", 1.0, "tuple spacing")
add(E, r"\boxed{\left[\frac{\pi}{2}, \pi\right)}", r"[\pi/2, \pi)", 1.0, "symbolic interval")
add(E, r"\boxed{(0.5, -\infty)}", r"(\frac{1}{2}, -\infty)", 1.0, "numeric tuple with infinity")
add(E, r"\boxed{3, 1, 2}", "1, 2, 3", 1.0, "unordered list of solutions")
add(E, r"\boxed{x = 3 \text{ or } x = -3}", r"\pm 3", 1.0, "disjunction against a \\pm gold")
add(E, r"\boxed{\pm 3}", "3, -3", 1.0, "\\pm against a list gold")
add(E, r"\boxed{1.5 \times 10^{-3}}", "0.0015", 1.0, "scientific notation")
add(E, r"\boxed{2^{10}}", "1024", 1.0, "power")
add(E, r"\boxed{\pi/4}", r"\frac{\pi}{4}", 1.0, "pi over four")
add(E, r"\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}}", r"\begin{pmatrix}1\\2\end{pmatrix}", 1.0, "matrix")
add(E, r"\boxed{\frac{4}{6}}", r"\frac23", 1.0, "unreduced fraction")
add(E, r"\boxed{2x+1}", "1+2x", 1.0, "commuted polynomial")
add(E, r"\boxed{\text{(B)}}", "B", 1.0, "choice letter")
add(E, r"\boxed{\frac{1}{2^{98}}}", r"2^{-98}", 1.0, "tiny values equal")
add(E, r"\boxed{0.1}", r"\frac{1}{10}", 1.0, "0.1 is exactly 1/10")
add(E, r"\boxed{.5}", "1/2", 1.0, "leading dot")
add(E, r"\boxed{\sqrt{3}/2}", r"\frac{\sqrt 3}{2}", 1.0, "spaced \\sqrt")
add(E, r"\boxed{\text{Monday}}", r"\text{Monday}", 1.0, "text answer")

# issue 17: several boxes for a multi-answer gold
add(E, r"\boxed{(2, 2)} \quad \text{and} \quad \boxed{(6, 2)}", "(2, 2), (6, 2)", 1.0, "two boxes, two gold answers")
add(E, r"\boxed{2} \text{ and } \boxed{3}", "3, 2", 1.0, "two boxes, unordered gold list")
add(E, r"$x = \boxed{-1}$ or $x = \boxed{5}$", "-1, 5", 1.0, "two boxed roots in one sentence")
add(E, r"\boxed{-1}, \quad \boxed{5}", r"\{-1, 5\}", 1.0, "two boxes against a set gold")
add(E, r"The answer is \boxed{5}, i.e. \boxed{5.0}", "5", 1.0, "one value boxed in two exact forms is no hedge")
add(E, r"\boxed{\frac12} \text{ or equivalently } \boxed{0.5}", "0.5", 1.0, "fraction and its exact decimal")
# MATH thousands separators
add(E, r"\boxed{10,\!000}", "10000", 1.0, "MATH ,\\! thousands separator")
add(E, r"\boxed{10000}", r"10,\!000", 1.0, "MATH ,\\! separator in the gold")
add(E, r"\boxed{32,\! 349}", "32349", 1.0, "MATH ,\\! separator followed by a space")
add(E, r"\boxed{1{,}000}", r"1,\!000", 1.0, "{,} against ,\\!")
add(E, r"\boxed{1,\!000,\!000}", "10^6", 1.0, "two ,\\! separators")
add(E, r"\boxed{10000}", r"\$10,\!000", 1.0, "currency with ,\\! separator")
add(E, r"\boxed{2,\!500 \text{ dollars}}", "2500", 1.0, ",\\! with a unit")
# named left sides in the gold (and the reverse)
add(E, r"\boxed{(3,2)}", "(p,q)=(3,2)", 1.0, "named tuple gold, bare value")
add(E, r"\boxed{1}", "|AB|=1", 1.0, "named length gold, bare value")
add(E, r"\boxed{7:32}", "S_{ABC}:S=7:32", 1.0, "named ratio gold, bare value")
add(E, r"\boxed{(p,q)=(3,2)}", "(3,2)", 1.0, "named prediction, bare gold")
add(E, r"\boxed{30^\circ}", r"\angle ABC = 30^\circ", 1.0, "named angle gold")
add(E, r"\boxed{\overline{AB} = 4}", "4", 1.0, "named segment prediction")
# \pm golds expand to their values
add(E, r"\boxed{\frac{1+\sqrt5}{2}, \frac{1-\sqrt5}{2}}", r"\frac{1 \pm \sqrt{5}}{2}", 1.0, "\\pm inside a fraction")
add(
    E,
    r"\boxed{\frac{1 \pm \sqrt{5}}{2}}",
    r"\frac{1-\sqrt5}{2}, \frac{1+\sqrt5}{2}",
    1.0,
    "\\pm prediction, list gold",
)
add(E, r"\boxed{x = \frac{-3 \pm \sqrt{17}}{4}}", r"\frac{-3\pm\sqrt{17}}{4}", 1.0, "x = \\pm in a fraction")
add(
    E,
    r"\boxed{\frac{-3-\sqrt{17}}{4}} \text{ or } \boxed{\frac{-3+\sqrt{17}}{4}}",
    r"\frac{-3\pm\sqrt{17}}{4}",
    1.0,
    "two boxed roots against a \\pm gold",
)
add(E, r"\boxed{1 + \sqrt{2}, 1 - \sqrt{2}}", r"1 \pm \sqrt{2}", 1.0, "\\pm gold, list prediction")
add(E, r"\boxed{\frac{-1-\sqrt{2}}{3}, \frac{-1+\sqrt{2}}{3}}", r"\frac{-1 \mp \sqrt{2}}{3}", 1.0, "\\mp gold")
# \frac shorthand
add(E, r"\boxed{1}", r"\frac3{3}", 1.0, "\\frac3{3} gold")
add(E, r"\boxed{\frac3{3}}", "1", 1.0, "\\frac3{3} prediction")
add(E, r"\boxed{\frac{\pi}2}", r"\frac{\pi}{2}", 1.0, "\\frac{\\pi}2")
add(E, r"\boxed{\frac\pi4}", r"\pi/4", 1.0, "\\frac\\pi4")
add(E, r"\boxed{\frac1{\sqrt2}}", r"\frac{\sqrt2}{2}", 1.0, "\\frac1{\\sqrt2}")
add(E, r"\boxed{\frac{\frac12}3}", r"\frac16", 1.0, "nested shorthand fractions")
# commuted nested radicals: the same tree up to argument order, decided at once (was killed at the time limit)
add(E, r"\boxed{\sqrt[3]{\sqrt{2}+\sqrt[3]{3}}}", r"\sqrt[3]{\sqrt[3]{3}+\sqrt{2}}", 1.0, "commuted nested cube root")
add(E, r"\boxed{\sqrt{3+\sqrt{5+\sqrt{7}}}}", r"\sqrt{\sqrt{\sqrt{7}+5}+3}", 1.0, "commuted triple radical")
# a clock time compares as written
add(E, r"\boxed{12:00}", "12:00", 1.0, "clock time, same text")

with open(Path(__file__).with_name("math_cases.jsonl"), "w") as f:
    for c in cases:
        f.write(json.dumps(c, ensure_ascii=False) + "\n")
print(len(cases), {s: sum(c["section"] == s for c in cases) for s in (A, G, H, E)})
