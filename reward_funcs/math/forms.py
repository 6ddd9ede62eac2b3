"""What kind of answer a string is, for the rules that depend on it: could it be a value at all (format rewards),
is it words (compared as text), is it an inequality; and the forms in which names and prompts are compared.

String work only, on answers already normalised by `normalize.canonical`.
"""

from __future__ import annotations

import re

from .normalize import _DROP, _FRAC_ALIASES, canonical, compact

# What a template or a policy writes where the answer should go: dots, boxes, blanks, question marks, and the words
# of "\\boxed{your answer}" / "\\boxed{number}".
_PLACEHOLDER_GLYPHS = re.compile(
    r"\\(?:ldots|cdots|dots[bc]?|vdots|square|Box|blacksquare|_)(?![A-Za-z])|\.{2,}|…|\?|_{2,}|[{}()\[\]\s,.;:]"
)
_PLACEHOLDER_WORDS = {"number", "answer", "your", "value", "result", "placeholder", "blank"}
_BARE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]+")
_MATH_MARK = re.compile(r"\d|[+\-*/^=<>|!]|\\[A-Za-z]+")


def could_be_value(answer: str | None) -> bool:
    """Whether an extracted answer could be a value at all: it has a digit, a math symbol or command, or is a lone
    variable or choice letter. Words alone ("number", "your answer", "odd") and placeholders (`...`, `\\ldots`,
    `?`) are not answers, so a format reward must not pay for them.

    >>> [could_be_value(a) for a in ["4", "x", "(C)", r"\\frac{1}{2}", r"\\emptyset", "5 \\text{ cm}"]]
    [True, True, True, True, True, True]
    >>> [could_be_value(a) for a in ["number", "your answer", r"\\text{answer}", r"\\ldots", "...", "x = number"]]
    [False, False, False, False, False, False]
    """
    c = canonical(answer)
    if c is None:
        return False
    rest = _PLACEHOLDER_GLYPHS.sub(" ", c)
    words = _BARE_WORD.findall(rest)
    if not rest.strip() or any(w.lower() in _PLACEHOLDER_WORDS for w in words):
        return False
    return bool(_MATH_MARK.search(rest)) or all(len(w) <= 2 for w in words)


_WORDS_ONLY = re.compile(r"^[A-Za-z' -]*[A-Za-z]{3,}[A-Za-z' -]*$")


def is_words(value: str) -> bool:
    """Whether a value is words (`odd`, `no solution`), which compare as text: sympy would read them as products of
    one-letter symbols, and then `sey` would equal `yes`.

    >>> is_words("no solution"), is_words("Odd"), is_words("xy"), is_words("2x"), is_words(r"\\sin x")
    (True, True, False, False, False)
    """
    return bool(_WORDS_ONLY.match(value.strip()))


_INEQUALITY = re.compile(r"<|>|!=|\\(?:le|leq|ge|geq|lt|gt|ne|neq|leqslant|geqslant)(?![A-Za-z])")


def is_inequality(value: str) -> bool:
    return bool(_INEQUALITY.search(value))


_RELATION_SPELLING = {"<=": "\\le ", ">=": "\\ge ", "!=": "\\ne ", "\\lt": "<", "\\gt": ">"}
_RELATION_SPELLINGS = re.compile(r"<=|>=|!=|\\(?:lt|gt)(?![A-Za-z])|\\(le|ge|ne)(?:q|qslant)(?![A-Za-z])")


def echo_form(text: str) -> str:
    """Text as compared when checking that an answer restates the prompt: no spaces, math delimiters, `\\left` /
    `\\right` or `\\dfrac`, one spelling per relation (`\\leq`, `<=` are `\\le`).

    >>> echo_form(r"Write $-2 \\leq x <= 7$ as \\left[ \\dfrac{1}{2} \\right]")
    'Write-2\\\\lex\\\\le7as[\\\\frac{1}{2}]'
    """
    text = _RELATION_SPELLINGS.sub(lambda m: f"\\{m[1]} " if m[1] else _RELATION_SPELLING[m[0]], text)
    return compact(_FRAC_ALIASES.sub("\\\\frac", _DROP.sub("", text.replace("$", ""))))


_BRACED_SUBSCRIPT = re.compile(r"_\{(\w)\}")


def name_key(name: str) -> str:
    """A name as compared: without spaces, one-character subscripts unbraced (`t_{1}` is `t_1`).

    >>> name_key("t_{1}"), name_key("(x_{1}, x_{2})"), name_key("a_{12}")
    ('t_1', '(x_1,x_2)', 'a_{12}')
    """
    return _BRACED_SUBSCRIPT.sub(r"_\1", compact(name))
