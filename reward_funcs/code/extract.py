"""The code a completion submits: the last fenced Python block (see :func:`extract_code`)."""

from __future__ import annotations

import bisect
import re
import textwrap
from collections import defaultdict

# An opening fence at the start of a line (indentation allowed): the fence, then the info string's first word.
_OPENER = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*([^\s`~]*)")
_PY_TAGS = {"python", "py", "python3", "py3"}


def extract_code(completion: str) -> str | None:
    """Return the code of the last ```python block (tags python/py/python3, any case), else of the last bare ```
    block, else None. Blocks in other languages are ignored; an unclosed (truncated) block does not count.

    >>> extract_code("Draft:\\n```python\\nx = 1\\n```\\nFinal:\\n```py\\nx = 2\\n```\\n```\\nsample output\\n```")
    'x = 2\\n'
    >>> extract_code("no code here") is None
    True
    """
    python, bare = None, None
    for tag, body in _blocks(completion.split("\n")):
        if tag.lower() in _PY_TAGS:
            python = body
        elif tag == "":
            bare = body
    code = python if python is not None else bare
    return code if code is not None and code.strip() else None


def _blocks(lines: list[str]):
    """Yield (info word, dedented body) of each fenced block, in order, in O(n log n).

    A block opens at a fence line and closes at the next line that is exactly the same fence (spaces and tabs
    around it allowed); a fence that never closes opens nothing. As the regular expression this replaces did, an
    opener of k fence characters that does not close tries k-1, ..., 3 of them (with an empty info word): ````` ````
    `````` is closed by ```` ``` ```` when no ```` ```` ```` follows. Lines after a block are searched again.
    """
    closers: dict[str, list[int]] = defaultdict(list)  # fence -> indices of the lines that are exactly that fence
    for j, line in enumerate(lines):
        stripped = line.strip(" \t")
        if len(stripped) >= 3 and stripped[0] in "`~" and stripped == stripped[0] * len(stripped):
            closers[stripped].append(j)
    i = 0
    while i < len(lines) - 1:  # an opener needs the newline after it
        m = _OPENER.match(lines[i])
        end = _close(closers, m.group(1), i) if m else None
        if end is None:
            i += 1
            continue
        j, fence = end
        yield (m.group(2) if fence == m.group(1) else ""), textwrap.dedent("".join(f"{s}\n" for s in lines[i + 1 : j]))
        i = j + 1


def _close(closers: dict[str, list[int]], fence: str, i: int) -> tuple[int, str] | None:
    """The first line after ``i`` that closes ``fence`` or, failing that, a shorter fence of the same character."""
    for n in range(len(fence), 2, -1):
        rows = closers.get(fence[:n], ())
        k = bisect.bisect_right(rows, i)
        if k < len(rows):
            return rows[k], fence[:n]
    return None
