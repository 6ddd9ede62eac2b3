"""Copy the repository's address from pyproject.toml into every notebook (its install cell and its Colab badge) and
into the README's Colab links.

The address is set in one place, ``[project.urls] Repository`` in pyproject.toml. A notebook cannot read it (Colab
opens the notebook before anything is installed, and a Markdown badge has no variables), so this script writes it
into each notebook's ``REPOSITORY = "..."`` line and its ``colab.research.google.com/github/...`` badge link, and
into the README's links of the same form; ``tests/test_notebooks.py`` and ``tests/test_docs.py`` fail when they
disagree. Until the repository is published the address is the placeholder ``https://github.com/OWNER/trl-dapo-ext``:
the badges lead nowhere and the install cell stops with "REPOSITORY is still the placeholder". Fill it in
pyproject.toml, then run this script.

    python notebooks/sync_repository.py           # rewrite the notebooks
    python notebooks/sync_repository.py --check   # exit 1 if any notebook is out of step
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
_REPOSITORY_LINE = re.compile(r'^REPOSITORY = "[^"]*"', re.MULTILINE)
_BADGE = re.compile(
    r"https://colab\.research\.google\.com/github/[^)\s]+?/blob/main/notebooks/(?P<name>[\w-]+\.ipynb)"
)


def repository() -> str:
    """The repository's address from pyproject.toml, e.g. ``https://github.com/OWNER/trl-dapo-ext``."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"].rstrip("/")


def colab_url(repo: str, notebook: str) -> str:
    """The Open-in-Colab address of ``notebooks/<notebook>`` (a file name) in the GitHub repository ``repo``."""
    path = repo.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{path}/blob/main/notebooks/{notebook}"


def synced(source: str, repo: str) -> str:
    """A cell's source with its ``REPOSITORY = "..."`` line and Colab badge links pointing at ``repo``."""
    source = _REPOSITORY_LINE.sub(f'REPOSITORY = "{repo}"', source)
    return _BADGE.sub(lambda match: colab_url(repo, match["name"]), source)


def main(argv: list[str]) -> int:
    import nbformat  # a dev dependency (tests/test_notebooks.py), as is Jupyter for editing notebooks

    repo, stale = repository(), []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        changed = False
        for cell in notebook.cells:
            new = synced(cell.source, repo)
            changed |= new != cell.source
            cell.source = new
        if changed:
            stale.append(path.name)
            if "--check" not in argv:
                nbformat.write(notebook, path)
    readme = ROOT / "README.md"
    text = readme.read_text()
    if synced(text, repo) != text:
        stale.append(readme.name)
        if "--check" not in argv:
            readme.write_text(synced(text, repo))
    verb = "out of step with" if "--check" in argv else "updated to"
    print(f"{', '.join(stale) or 'no notebook nor the README'} {verb} {repo}")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
