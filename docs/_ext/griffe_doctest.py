"""Griffe extension for the API reference: docstring examples (``>>>`` lines and their output) render as code.

Our docstrings use Google style with ``Example:`` sections, which griffe shows as an admonition of Markdown text;
without fences, ``>>>`` would become a block quote and a printed list like ``['a', 'b']`` a broken link.
"""

from __future__ import annotations

import re

import griffe

_PROMPT = re.compile(r"^(\s*)>>> ")


def fence_doctests(text: str) -> str:
    """Wrap each run of doctest lines (prompt, continuation and output, up to a blank line) in a pycon fence."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        match = _PROMPT.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent = match.group(1)
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and ">>> " in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
