"""String-level normalisation of extracted answers, splitting into values, and exact numeric comparison.

Everything here is cheap string work on answers of at most `MAX_ANSWER_CHARS` characters, so most comparisons
(GSM8K-style numbers, identical LaTeX) never need sympy. Rules that matter for reward hacking live here:
thousands separators / units / currency / degree and percent signs are dropped (the *number* is compared, never x100),
decimals are compared as exact fractions, and anything holding several values is split so hedges can be caught.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_ANSWER_CHARS = 1000
_MAX_VALUES = 32

# A `\\` matrix row break is matched first so its second backslash is never read as a spacing command. `\quadx`
# (no space before a one-letter name, as in `x_{1}=2,\quadx_{2}=5`) is no TeX command: it is `\quad x`.
_SPACING = re.compile(r"\\\\|\\[!,;:> ]|~|\\(?:qquad|quad)(?![A-Za-z]{2})")
_DROP = re.compile(r"\\(?:left|right|displaystyle|textstyle|big|Big|bigg|Bigg)(?![A-Za-z])")
_FRAC_ALIASES = re.compile(r"\\[dt]frac(?![A-Za-z])")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mbox|operatorname)\s*\{")
_UNIT_TEXT_TAIL = re.compile(
    r"^(?P<head>.*?[\d})!])\s*(?:\\(?:text|mbox|mathrm|textrm)\s*\{[^{}]*\}(?:\^\{?\d\}?)?\s*)+$"
)
_DEGREE_NUMBER = re.compile(
    r"^(?P<num>[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+))\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree)\s*(?:[CF])?$"
)
_PERCENT = re.compile(r"\\?%|\s*\b(?:percent(?:age)?|pct)\b")
_CURRENCY = re.compile(r"\\\$|\$|€|£|¥|₹|\\euro(?![A-Za-z])|\\pounds(?![A-Za-z])|\bUSD\b|\bEUR\b")
# A first group of 0 (`0,111`) is a decimal comma or a list, never thousands.
_THOUSANDS = re.compile(r"^[+-]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?$")
# MATH writes thousands as `10{,}000` or `10,\!000` (also with a space after `\!`): one number, not a list.
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|,\s*\\!)\s*(?=\d{3}(?!\d))")
_THIN_THOUSANDS = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
# "42 thousand" is 42000, not 42 with a unit: scale words become powers of ten before units are dropped.
_SCALE = {"hundred": 2, "thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_SCALE_WORD = re.compile(
    r"(?P<num>\d(?:[\d,]*\d)?(?:\.\d+)?)\s*(?P<open>\\(?:text|mbox|mathrm|textrm)\s*\{\s*)?"
    r"(?P<word>hundred|thousand|million|billion|trillion)s?\b(?(open)\s*\})",
    re.IGNORECASE,
)
_UNIT_WORD = re.compile(r"^(?:[A-Za-z]{2,}\.?(?:\^\{?\d\}?|\d)?|[A-Za-z]+/[A-Za-z]+)$")
_MATH_WORDS = {
    "or", "and", "pi", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "inf", "infty",
    "infinity", "mod", "choose", "i", "e",
}  # fmt: skip
_PLAIN_SQRT = re.compile(r"(?<![A-Za-z\\])sqrt\s*\(([^()]*)\)")
_PLAIN_PI = re.compile(r"(?<![A-Za-z\\])pi(?![A-Za-z])")
_PLAIN_INF = re.compile(r"(?<![A-Za-z\\])(?:infinity|inf)(?![A-Za-z])")
_SHORT_SQRT = re.compile(r"\\sqrt\s*(\d)")
_FRAC = re.compile(r"\\frac(?![A-Za-z])")
_CONTROL_WORD = re.compile(r"\\(?:[A-Za-z]+|.)")
_SCI = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d+)(?![\w.])")
_PM = re.compile(r"\\pm(?![A-Za-z])|\\mp(?![A-Za-z])|±|∓")

_NUM = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_RE_NUM = re.compile(rf"^{_NUM}$")
_RE_FRAC = re.compile(rf"^([+-]?)\\frac\{{({_NUM})\}}\{{({_NUM})\}}$")
_RE_SLASH = re.compile(rf"^({_NUM})/({_NUM})$")
_RE_SCI = re.compile(rf"^({_NUM})(?:\\times|\\cdot|\*)10\^(?:\{{([+-]?\d+)\}}|(\d))$")
_RE_POW10 = re.compile(r"^([+-]?)10\^(?:\{([+-]?\d+)\}|(\d))$")
_NAME = re.compile(
    r"^(?:[A-Za-z]{1,3}|\\(?:alpha|beta|gamma|delta|epsilon|theta|lambda|mu|nu|phi|varphi|psi|omega|sigma|rho|tau|xi)"
    r")(?:_\{?[\w\\]+\}?|')*(?:\([^()=]*\))?$"
)
_CONSTANTS = {"e", "i", "\\pi", "pi"}
# Named left sides of a gold such as `(p,q) = (3,2)`, `|AB| = 1`, `S_{ABC}:S = 7:32`, `\\angle ABC = 30`.
_NAME_DECOR = re.compile(
    r"^(?:m?\\angle|\\overline|\\widehat|\\overrightarrow|\\vec|\\triangle|\\bar|\\hat)\{?(.*?)\}?$"
)
_NAME_ABS = re.compile(r"^(?:\||\\\||\\lvert|\\vert)(.+?)(?:\||\\\||\\rvert|\\vert)$")


def _is_name_atom(c: str) -> bool:
    m = _NAME_ABS.match(c) or _NAME_DECOR.match(c)
    if m:
        c = m.group(1)
    if c.startswith("[") and c.endswith("]"):  # `[ABC]`: area
        c = c[1:-1]
    return bool(_NAME.match(c)) and c not in _CONSTANTS


def is_name(side: str) -> bool:
    """Whether one side of an equation only names what is asked: `x`, `f(2)`, `(p,q)`, `|AB|`, `S_{ABC}:S`,
    `\\frac{AB}{CD}` (a ratio of names, like `AB/CD`).

    >>> is_name("(p, q)"), is_name("|AB|"), is_name("S_{ABC}:S"), is_name("x+y"), is_name("(3, 2)")
    (True, True, True, False, False)
    >>> is_name(r"\\frac{AB}{CD}"), is_name(r"\\frac{x+1}{2}"), is_name(r"\\frac{a}{2}")
    (True, False, False)
    """
    c = compact(side)
    if not c or c in _CONSTANTS:
        return False
    if _is_name_atom(c):
        return True
    if c.startswith("\\frac{"):
        num = _tex_argument(c, len("\\frac"))
        den = _tex_argument(c, num[1]) if num else None
        return den is not None and den[1] == len(c) and _is_name_atom(num[0]) and _is_name_atom(den[0])
    if len(c) > 2 and c[0] in "([" and c[-1] in ")]":  # a tuple of names
        items = _top_level_splits(c[1:-1], re.compile(","))
        return len(items) > 1 and all(_is_name_atom(x) for x in items)
    parts = _top_level_splits(c, re.compile(r":|/"))  # a ratio of names
    return len(parts) > 1 and all(_is_name_atom(x) for x in parts)


def _text_unwrap(s: str) -> str:
    """`\\text{X}` -> X (a `\\text{or}` becomes a spaced `or` so it is seen as a disjunction)."""
    out = []
    pos = 0
    for _ in range(200):
        m = _TEXT_CMD.search(s, pos)
        if m is None:
            break
        depth, j = 1, m.end()
        while j < len(s) and depth:
            if s[j] == "{":
                depth += 1
            elif s[j] == "}":
                depth -= 1
            j += 1
        if depth:
            break
        inner = s[m.end() : j - 1]
        out.append(s[pos : m.start()])
        out.append(f" {inner.strip()} " if inner.strip().lower() in ("or", "and") else inner)
        pos = j
    out.append(s[pos:])
    return "".join(out)


def _strip_outer_braces(s: str) -> str:
    while s.startswith("{") and s.endswith("}"):
        depth = 0
        for k, c in enumerate(s):
            depth += c == "{"
            depth -= c == "}"
            if depth == 0 and k < len(s) - 1:
                return s
        s = s[1:-1].strip()
    return s


def _strip_unit_words(s: str) -> str:
    tokens = s.split(" ")
    while len(tokens) > 1:
        last = tokens[-1]
        head = " ".join(tokens[:-1]).rstrip()
        if not _UNIT_WORD.match(last) or last.lower().rstrip(".") in _MATH_WORDS:
            break
        if not re.search(r"\d", head) or not re.search(r"[\d})!]$", head):
            break
        tokens = head.split(" ")
    return " ".join(tokens)


def _tex_argument(s: str, i: int) -> tuple[str, int] | None:
    """The TeX argument starting at or after s[i] (a braced group or one token) and the index after it."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s) or s[i] == "}":
        return None
    if s[i] == "{":
        depth, j = 0, i
        while j < len(s):
            if s[j] == "\\":  # `\{` and `\}` are not grouping braces
                j += 2
                continue
            depth += (s[j] == "{") - (s[j] == "}")
            if depth == 0:
                return s[i + 1 : j], j + 1
            j += 1
        return None
    if s[i] == "\\":
        m = _CONTROL_WORD.match(s, i)
        return (m.group(), m.end()) if m else None
    return s[i], i + 1


def _braced_fracs(s: str) -> str:
    """`\\frac12`, `\\frac3{3}`, `\\frac{\\pi}2`, `\\frac\\pi4` -> `\\frac{a}{b}`: TeX takes one token per unbraced argument."""
    out, pos = [], 0
    for m in _FRAC.finditer(s):
        if m.start() < pos:
            continue
        a = _tex_argument(s, m.end())
        b = _tex_argument(s, a[1]) if a else None
        if b is None:
            continue
        out.append(s[pos : m.start()])
        out.append(f"\\frac{{{_braced_fracs(a[0])}}}{{{_braced_fracs(b[0])}}}")
        pos = b[1]
    out.append(s[pos:])
    return "".join(out)


def canonical(answer: str | None) -> str | None:
    """Normalised answer text, or None when there is nothing comparable (empty or longer than MAX_ANSWER_CHARS)."""
    if answer is None:
        return None
    s = answer.strip()
    if not s or len(s) > MAX_ANSWER_CHARS:
        return None
    s = s.replace("−", "-").replace("×", "\\times ").replace("÷", "\\div ").replace("\u2009", " ")
    s = _LATEX_THOUSANDS.sub("", s)
    s = _THIN_THOUSANDS.sub("", s)
    s = _DROP.sub("", s)
    s = _SPACING.sub(lambda m: m.group() if m.group() == "\\\\" else " ", s)
    s = _FRAC_ALIASES.sub("\\\\frac", s)
    s = _SCALE_WORD.sub(lambda m: f"{m['num']} \\times 10^{{{_SCALE[m['word'].lower()]}}}", s)
    m = _UNIT_TEXT_TAIL.match(s)
    if m:
        s = m.group("head")
    s = _text_unwrap(s)
    s = _CURRENCY.sub("", s)
    s = _PERCENT.sub("", s)
    s = " ".join(s.split()).strip().rstrip(".")
    m = _DEGREE_NUMBER.match(s)
    if m:
        s = m.group("num")
    s = _strip_unit_words(s)
    s = _SHORT_SQRT.sub(r"\\sqrt{\1}", s)
    s = _braced_fracs(s)
    s = _PLAIN_SQRT.sub(r"\\sqrt{\1}", s)
    s = _PLAIN_PI.sub(r"\\pi", s)
    s = _PLAIN_INF.sub(r"\\infty", s)
    s = _SCI.sub(r"\1\\times10^{\2}", s)
    s = _strip_outer_braces(s.strip())
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    s = s.strip()
    return s or None


def compact(s: str) -> str:
    return "".join(s.split())


def _top_level_matches(s: str, seps: re.Pattern):
    """Matches of `seps` that are outside (), [], {} and \\{ \\}."""
    depth, i, n = 0, 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            m = seps.match(s, i)
            if m and m.end() > i:
                yield m
                i = m.end()
                continue
        i += 1


def _top_level_splits(s: str, seps: re.Pattern) -> list[str]:
    parts, start = [], 0
    for m in _top_level_matches(s, seps):
        parts.append(s[start : m.start()])
        start = m.end()
    parts.append(s[start:])
    return parts


# `(4,9)or(9,4)`: a connective between two bracketed values needs no spaces around it.
_SEPARATORS = re.compile(
    r",|;|\s+(?:or|and)\s+|(?<=[)\]])\s*(?:or|and)\s*(?=[(\[])|\\(?:lor|vee)(?![A-Za-z])|\\text\{\s*(?:or|and)\s*\}"
)


_PLUS = re.compile(r"\\pm(?![A-Za-z])|±")
_MINUS = re.compile(r"\\mp(?![A-Za-z])|∓")
_SIGN_RUN = re.compile(r"[-+](?:\s*[-+])+")
_LEADING_PLUS = re.compile(r"(^|[{(\[=,])(\s*)\+")


def _signs(run: re.Match) -> str:
    return "-" if run.group().count("-") % 2 else "+"


def _expand_pm(part: str) -> list[str]:
    """`a \\pm b` -> [`a+b`, `a-b`], wherever the sign stands (`\\frac{1 \\pm \\sqrt{5}}{2}` too).

    A `\\pm` is the sign of the term after it, so the two values are the text with every `\\pm` read as `+` (and
    every `\\mp` as `-`), then the other way round: several signs in one value are correlated, as in
    `a \\pm b \\mp c`.
    """
    if not has_pm(part):
        return [part]
    out = []
    for plus, minus in (("+", "-"), ("-", "+")):
        v = _MINUS.sub(minus, _PLUS.sub(plus, part))
        v = _LEADING_PLUS.sub(r"\1\2", _SIGN_RUN.sub(_signs, v))
        out.append(v.strip())
    return out


def split_values(s: str) -> list[str] | None:
    """The values an answer states: `3, 4` / `3 or 4` / `\\pm 3` / `\\{1, 2\\}` give two; None if too many."""
    body = s
    if body.startswith("\\{") and body.endswith("\\}") and len(_top_level_splits(body, _SEPARATORS)) == 1:
        body = body[2:-2]  # a set literal is an unordered list of values
    parts = [p.strip() for p in _top_level_splits(body, _SEPARATORS)]
    parts = [p for p in parts if p]
    out: list[str] = []
    for p in parts:
        out.extend(x.strip() for x in _expand_pm(p))
        if len(out) > _MAX_VALUES:
            return None
    return out


def has_pm(s: str) -> bool:
    return bool(_PM.search(s))


def equation_sides(value: str) -> tuple[list[str], list[str]]:
    """(names, values) of `a = b = ...`: `x = 5` -> (["x"], ["5"]); `7 = 5` -> ([], ["7", "5"])."""
    sides, depth, start = [], 0, 0
    for i, c in enumerate(value):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "=" and depth == 0:
            prev = value[i - 1] if i else ""
            nxt = value[i + 1] if i + 1 < len(value) else ""
            if prev in "<>!:=\\" or nxt == "=":
                continue
            sides.append(value[start:i])
            start = i + 1
    sides.append(value[start:])
    sides = [x.strip() for x in sides]
    if len(sides) == 1:
        return [], sides
    names = [x for x in sides if is_name(x)]
    values = [x for x in sides if x not in names]
    return names, [v for v in values if v]


def exact_value(s: str) -> Fraction | None:
    """The exact rational an answer denotes when it is a plain number (`-1.50`, `3/4`, `\\frac{1}{2}`, `2\\times10^{-3}`)."""
    c = compact(s)
    if len(c) > 400:
        return None
    try:
        if _RE_NUM.match(c):
            return Fraction(c)
        m = _RE_FRAC.match(c)
        if m:
            den = Fraction(m.group(3))
            return None if den == 0 else (-1 if m.group(1) == "-" else 1) * Fraction(m.group(2)) / den
        m = _RE_SLASH.match(c)
        if m:
            den = Fraction(m.group(2))
            return None if den == 0 else Fraction(m.group(1)) / den
        m = _RE_SCI.match(c)
        if m:
            e = int(m.group(2) or m.group(3))
            return Fraction(m.group(1)) * Fraction(10) ** e if abs(e) <= 400 else None
        m = _RE_POW10.match(c)
        if m:
            e = int(m.group(2) or m.group(3))
            return (-1 if m.group(1) == "-" else 1) * Fraction(10) ** e if abs(e) <= 400 else None
    except (ValueError, ZeroDivisionError):
        return None
    return None


_INF = {"\\infty": "inf", "+\\infty": "inf", "-\\infty": "-inf"}


def exact_structure(s: str) -> tuple | None:
    """`(a, b]`, `[a, b]`, `(a, b, c)` with plain-number (or +-infinity) entries: (open, close, values), else None.

    Brackets are kept as written, so `[1, 2)` differs from `[1, 2]` and `(1, 2)` from `(2, 1)`; only equal brackets
    and exactly equal entries are the same structure.
    """
    c = compact(s)
    if len(c) < 5 or c[0] not in "([" or c[-1] not in ")]":
        return None
    inner = c[1:-1]
    if any(ch in inner for ch in "()[]{}") and "\\frac" not in inner:
        return None
    items = inner.split(",")
    if len(items) < 2:
        return None
    values = []
    for item in items:
        if item in _INF:
            values.append(_INF[item])
            continue
        v = exact_value(item)
        if v is None:
            return None
        values.append(v)
    return c[0], c[-1], tuple(values)
