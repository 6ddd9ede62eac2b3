"""The code a completion submits: the last fenced Python block (see :func:`extract_code`)."""

from __future__ import annotations

import re
import textwrap

# Opening fence at the start of a line (indentation allowed), info string, body, closing fence of the same kind.
_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*([^\s`~]*)[^\n]*\n(.*?)^[ \t]*\2[ \t]*$", re.M | re.S)
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
    for m in _FENCE.finditer(completion):
        tag = m.group(3).lower()
        body = textwrap.dedent(m.group(4))
        if tag in _PY_TAGS:
            python = body
        elif tag == "":
            bare = body
    code = python if python is not None else bare
    return code if code is not None and code.strip() else None
