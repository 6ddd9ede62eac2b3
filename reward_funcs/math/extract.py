"""Finding the final answer in a completion or a gold solution: string work only, linear time, no sympy.

Policy (see docs/math-grading.md): the final answer is the last anchored answer. Anchors are `\\boxed{...}` /
`\\fbox{...}` (balanced braces), `<answer>...</answer>`, a GSM8K `#### N`, an `Answer:` / `Final Answer:` line and
"the (final) answer is X". Text inside `<think>...</think>` never counts; an unclosed `<think>` means no answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK_TAG = re.compile(r"<(/?)think>", re.IGNORECASE)
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_LINE_ANCHOR = re.compile(
    r"(?im)^[ \t>*_#-]*(?:final[ \t]+answer|answer)[ \t]*(?:\*\*|__)?[ \t]*[:：](?:[ \t]*(?:\*\*|__))?"
)
_PHRASE_ANCHOR = re.compile(r"(?i)\b(?:the|my|our)\s+(?:final\s+)?answer\s+is\b[ \t:]*")
_GSM8K_ANCHOR = re.compile(r"####[ \t]*")
_FILLER = re.compile(
    r"(?i)^(?:(?:therefore|thus|hence|then|indeed|simply|just|clearly|exactly|actually|equal\s+to|:|,)\s*)+"
)
# What a phrase / `####` answer may start with: a number, math, or a lone variable / choice letter.
_MATHLIKE_START = re.compile(r"(?:[-+−.(\[{\\$\d]|\*\*|[A-Za-z](?![A-Za-z]))")
_MATH_DELIMS = re.compile(r"\$\$|\$|\\\(|\\\)|\\\[|\\\]")
_CONNECTIVE = re.compile(r"(?i)^(?:or|and|,or|,and|\\lor|\\vee)$")
# Between two boxes: `\text{...}` groups (any words) and spacing commands are part of one displayed answer.
_GAP_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm)\s*\{")
_GAP_SPACING = re.compile(r"\\(?:quad|qquad)(?![A-Za-z])|\\hspace\*?\{[^{}]*\}|\\[,;:!> ]|\\\\|~")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
_GAP_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
# "the answer is 5, since 2+3=5": the justification after the value is not part of the answer.
_JUSTIFICATION = re.compile(r"(?i),?\s+(?:since|because|as|which|so|where|given|when|thus|hence|therefore)\b")
_QUOTED = re.compile(r'^(?:\\?"|“)(.*?)(?:\\?"|”)$', re.S)
_UNANCHORED_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_MAX_SENTENCE = 5000
_MAX_BOX_CHAIN = 8
_MAX_TRIED = 50  # anchors of one kind examined from the end (bounds the work on adversarial text)


@dataclass
class _Anchor:
    start: int
    end: int  # end of the anchored content span in the text
    content: str | None  # None: the anchor is there but yields no answer (unclosed box / tag)
    kind: str  # "box" | "tag" | "line" | "phrase" | "gsm8k"


def strip_think(text: str) -> str | None:
    """Remove `<think>...</think>` blocks; None when a `<think>` is never closed.

    A `</think>` with no opening tag (chat templates that put `<think>` in the prompt) makes everything before it
    reasoning.
    """
    out: list[str] = []
    pos = 0
    inside = False
    for m in _THINK_TAG.finditer(text):
        if m.group(1):  # closing tag
            if not inside:
                out = []
            inside = False
            pos = m.end()
        elif not inside:
            out.append(text[pos : m.start()])
            inside = True
    if inside:
        return None
    out.append(text[pos:])
    return "".join(out)


def _match_brace(text: str, open_idx: int) -> int:
    """Index of the `}` closing the `{` at open_idx (escaped `\\{`/`\\}` ignored); -1 if unclosed."""
    depth = 0
    i = open_idx
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _box_at(text: str, start: int) -> _Anchor:
    """The box anchor whose `\\boxed`/`\\fbox` starts at `start`."""
    m = _BOX.match(text, start)
    i = m.end()
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        close = _match_brace(text, i)
        if close < 0:
            return _Anchor(start, len(text), None, "box")
        return _Anchor(start, close + 1, text[i + 1 : close], "box")
    # `\boxed 5` (no braces): one token
    j = i
    while j < len(text) and not text[j].isspace() and text[j] not in "$":
        j += 1
    if j == i:
        return _Anchor(start, i, None, "box")
    return _Anchor(start, j, text[i:j], "box")


def _last_box(text: str, before: int | None = None) -> _Anchor | None:
    end = len(text) if before is None else before
    i = max(text.rfind("\\boxed", 0, end), text.rfind("\\fbox", 0, end))
    while i >= 0:
        if _BOX.match(text, i):
            return _box_at(text, i)
        i = max(text.rfind("\\boxed", 0, i), text.rfind("\\fbox", 0, i))
    return None


def _sentence(text: str, start: int) -> tuple[str, int]:
    """From `start` to the end of the sentence: a newline, or a `.` followed by space/end outside braces and `$`."""
    depth = 0
    in_math = False
    n = min(len(text), start + _MAX_SENTENCE)
    i = start
    while i < n:
        c = text[i]
        if c == "\n":
            break
        if c == "\\":
            i += 2
            continue
        if c == "$":
            in_math = not in_math
        elif c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        elif c == "." and depth == 0 and not in_math and (i + 1 >= len(text) or text[i + 1].isspace()):
            break
        i += 1
    return text[start:i], i


def _cut_justification(content: str) -> str:
    """Cut at the first top-level "since"/"because"/... outside `$...$` and braces."""
    for m in _JUSTIFICATION.finditer(content):
        before = content[: m.start()]
        if before.count("$") % 2 == 0 and before.count("{") == before.count("}") and before.strip():
            return before
    return content


def _line_content(text: str, m: re.Match) -> tuple[str, int]:
    content, end = _sentence(text, m.end())
    if not content.strip(" \t*_"):  # "Final Answer:\n42": take the next non-empty line
        nxt = end
        while nxt < len(text) and text[nxt] in "\r\n \t":
            nxt += 1
        if nxt < len(text):
            content, end = _sentence(text, nxt)
    return content, end


def _last_regex_anchor(text: str, pattern: re.Pattern, kind: str, need_mathlike: bool) -> _Anchor | None:
    # Walk the matches from the end and stop at the first usable one, so many anchors cost one sentence scan each
    # only until the last valid one is found.
    for m in reversed(list(pattern.finditer(text))[-_MAX_TRIED:]):
        if kind == "line":
            content, end = _line_content(text, m)
        else:
            content, end = _sentence(text, m.end())
        if kind == "phrase":
            content = _FILLER.sub("", content.lstrip())
        content = _cut_justification(content)
        if need_mathlike and not _MATHLIKE_START.match(content.strip().lstrip('"“')):
            continue
        if not content.strip():
            continue
        return _Anchor(m.start(), end, content, kind)
    return None


def _last_tag(text: str, lower: str, gold: bool = False) -> _Anchor | None:
    i = lower.rfind("<answer>")
    if i < 0:
        return None
    j = lower.find("</answer>", i)
    if j < 0:
        return _Anchor(i, len(text), None, "tag")
    inner = text[i + len("<answer>") : j]
    # An answer tag holding boxes: its own last box is the answer (with the same hedge check).
    if _last_box(inner) is not None:
        return _Anchor(i, j + len("</answer>"), _box_answer(inner, _last_box(inner), gold), "tag")
    return _Anchor(i, j + len("</answer>"), inner, "tag")


def _box_gap(gap: str) -> tuple[bool, str, bool]:
    """(joins the boxes into one hedged answer, separator to write between them, unlinked) for the text between two
    boxes; unlinked: words outside `\\text{...}` and no connective or comma (`\\boxed{1} no no \\boxed{2}`).

    Boxes are one answer unless the text between them starts a new sentence with words in it ("\\boxed{17}. Wait,
    I made an error: \\boxed{18}" is a self-correction) or holds another anchor (`<answer>`, "Answer:", "the answer
    is"). Spacing commands, punctuation, connectives and `\\text{...}` groups with any words
    ("\\boxed{3} \\text{ for part (a) and } \\boxed{4}") never separate two answers.
    """
    parts, pos = [], 0
    for m in _GAP_TEXT.finditer(gap):
        if m.start() < pos:
            continue
        close = _match_brace(gap, m.end() - 1)
        if close < 0:
            break
        parts.append(gap[pos : m.start()])
        parts.append(" ")
        pos = close + 1
    parts.append(gap[pos:])
    rest = _MATH_DELIMS.sub(" ", _GAP_SPACING.sub(" ", "".join(parts)))
    if _SENTENCE_END.search(rest) and _GAP_WORD.search(rest):
        return False, "", False
    lower = rest.lower()
    if "####" in rest or "<answer>" in lower or "</answer>" in lower or _LINE_ANCHOR.search(rest):
        return False, "", False  # another anchor in between: each is read on its own
    if _PHRASE_ANCHOR.search(rest):
        return False, "", False
    compact = "".join(rest.split())
    sep = f" {compact} " if _CONNECTIVE.match(compact) else ", "
    words = [w.lower() for w in _GAP_WORD.findall(rest)]
    linked = "," in rest or ";" in rest or "or" in words or "and" in words
    return True, sep, bool(words) and not linked


def _box_answer(text: str, last: _Anchor, gold: bool = False) -> str | None:
    """Content of the last box; boxes joined to it in the same sentence (see `_box_gap`) are a hedge: keep all.

    In a gold, words without a connective between two boxes of one sentence (`\\boxed{1} no no \\boxed{2}`) may be a
    correction or two answers: no reading is safe to grade against, so the gold has no answer (None). Linked boxes
    (`\\boxed{1} papers and \\boxed{2} bins`) are one answer of two values, as in Math-Verify's own tests.
    """
    if last.content is None:
        return None
    parts = [last.content]
    cur = last
    for _ in range(_MAX_BOX_CHAIN):
        prev = _last_box(text, cur.start)
        if prev is None or prev.content is None or prev.end > cur.start:
            break
        if cur.start - prev.end > _MAX_SENTENCE:
            break
        joined, sep, unlinked = _box_gap(text[prev.end : cur.start])
        if not joined:
            break
        cur = prev
        if "".join(prev.content.split()) in {"".join(p.split()) for p in parts[::2]}:
            continue  # the same answer boxed twice is not a hedge
        if gold and unlinked:
            return None
        parts.insert(0, sep)
        parts.insert(0, prev.content)
    return "".join(parts)


def _unwrap_boxes(s: str) -> str:
    out = []
    pos = 0
    while True:
        m = _BOX.search(s, pos)
        if m is None:
            out.append(s[pos:])
            return "".join(out)
        a = _box_at(s, m.start())
        out.append(s[pos : m.start()])
        if a.content is None:
            out.append(s[m.start() :])
            return "".join(out)
        out.append(a.content)
        pos = a.end


def clean_answer(s: str | None) -> str | None:
    """Strip math delimiters, markdown emphasis, quotes around the whole answer and trailing punctuation; None if
    nothing is left."""
    if s is None:
        return None
    s = s.replace("\\$", "\x00")  # keep escaped dollars (currency) through delimiter removal
    s = _MATH_DELIMS.sub(" ", s).replace("\x00", "\\$")
    s = s.replace("**", "").replace("__", "")
    s = s.strip().rstrip(".,;:!?").strip()
    s = _QUOTED.sub(r"\1", s).strip().rstrip(".,;:!?").strip()  # `The final answer is "12 and 13".`
    s = " ".join(s.split())
    return s or None


def find_anchor(text: str, gold: bool = False) -> tuple[bool, str | None]:
    """(anchor found, final answer or None) for text that has already had its reasoning removed (`gold`: the text is
    a gold solution, see `_box_answer`)."""
    lower = text.lower()
    candidates = [
        _last_box(text),
        _last_tag(text, lower, gold) if "<answer>" in lower else None,
        _last_regex_anchor(text, _LINE_ANCHOR, "line", need_mathlike=False) if "answer" in lower else None,
        _last_regex_anchor(text, _PHRASE_ANCHOR, "phrase", need_mathlike=True) if "answer" in lower else None,
        _last_regex_anchor(text, _GSM8K_ANCHOR, "gsm8k", need_mathlike=True) if "####" in text else None,
    ]
    anchors = [a for a in candidates if a is not None]
    if not anchors:
        return False, None
    last = max(anchors, key=lambda a: a.start)
    if last.kind == "box":
        # A box inside an "Answer:" line or "the answer is ..." sentence: the whole sentence is the answer,
        # so "Answer: 3 or \boxed{4}" stays a hedge.
        containers = [a for a in anchors if a.kind in ("line", "phrase", "gsm8k") and a.start < last.start < a.end]
        if containers and last.content is not None:
            inner = max(containers, key=lambda a: a.start)
            return True, clean_answer(_unwrap_boxes(inner.content))
        return True, clean_answer(_box_answer(text, last, gold))
    if last.content is None:
        return True, None
    return True, clean_answer(_unwrap_boxes(last.content))


def extract_answer(text: str, unanchored_fallback: bool = False) -> str | None:
    """The final answer of a completion under the policy above (the public `extract_final_answer`)."""
    body = strip_think(text)
    if body is None:
        return None
    found, answer = find_anchor(body)
    if found or not unanchored_fallback:
        return answer
    numbers = _UNANCHORED_NUMBER.findall(body[-_MAX_SENTENCE:])
    return numbers[-1].rstrip(",") if numbers else None


_ONE_TEXT = re.compile(r"^\\(?:text|textbf|textrm|mbox)\s*\{[^{}$]*\}$")
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}\b")


def gold_answer(solution: str) -> str | None:
    """The answer in a gold column: raw (`18`, `\\frac{1}{2}`), GSM8K (`... #### 18`) or MATH (`... \\boxed{..}`).

    A gold without any anchor that reads like prose (a solution whose answer we cannot locate) gives None rather
    than a sentence that sympy would happily turn into a product of symbols.
    """
    text = str(solution)
    found, answer = find_anchor(text, gold=True)
    if found:
        return answer
    answer = clean_answer(text)
    if answer is not None and _ONE_TEXT.match(answer):
        return answer  # `$\\text{The midpoints form a regular hexagon}$`: a text answer, compared as text
    if len(_PROSE_WORD.findall(_MATH_DELIMS.sub(" ", text))) >= 4:
        return None
    return answer
