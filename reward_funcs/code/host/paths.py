"""What the sandbox's interpreter is shown: the folders the namespace backends bind read-only, and the standard
library modules the ``root`` fallback imports before the uid drops when the sandbox uid cannot reach them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Common stdlib modules imported before dropping privileges when the interpreter's stdlib sits behind a directory the
# sandbox uid cannot traverse (e.g. pyenv under /root) in the ``root`` fallback.
PREIMPORT = (
    "collections",
    "heapq",
    "bisect",
    "itertools",
    "functools",
    "math",
    "cmath",
    "re",
    "string",
    "random",
    "decimal",
    "fractions",
    "statistics",
    "typing",
    "dataclasses",
    "copy",
    "operator",
    "datetime",
    "array",
    "queue",
    "threading",
    "io",
    "struct",
    "textwrap",
    "unicodedata",
    "hashlib",
    "enum",
    "abc",
    "numbers",
)


def python_paths(site_packages: bool) -> list[str]:
    """The folders the namespace backends show read-only: the Python install, and with ``site_packages`` the
    environment and its package folders, never the other entries of ``sys.path`` (the script's folder, the working
    directory, a source checkout on an editable install), which can hold the datasets and their tests."""
    paths = {sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    if site_packages:
        paths.add(sys.prefix)
        paths.update(p for p in sys.path if _is_package_folder(p))
    return sorted(paths)


def _is_package_folder(path: str) -> bool:
    """A ``site-packages`` / ``dist-packages`` folder, or a folder inside the Python install or the environment."""
    if not path or not os.path.isdir(path):
        return False
    real = os.path.realpath(path)
    if os.path.basename(real) in ("site-packages", "dist-packages"):
        return True
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return any(real == p or real.startswith(p + os.sep) for p in prefixes)


def stdlib_traversable() -> bool:
    """True when every directory above the stdlib is world-searchable (the ``root`` fallback needs it)."""
    path = Path(os.__file__).resolve().parent
    for parent in [path, *path.parents]:
        try:
            if not parent.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True
