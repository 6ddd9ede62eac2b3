"""Every `pip install 'trl-dapo-ext[extra]'` hint in the package names an extra that pyproject.toml defines."""

from __future__ import annotations

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_install_hints_name_existing_extras():
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    hinted = {}
    sources = [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "trl_dapo_ext" / "recipes").rglob("*.yaml"),
    ]
    sources += [path for folder in ("trl_dapo_ext", "reward_funcs") for path in (ROOT / folder).rglob("*.py")]
    for path in sources:
        if path.is_file():
            for extra in re.findall(r"trl-dapo-ext\[([^\]]+)\]", path.read_text()):
                for name in extra.split(","):
                    hinted.setdefault(name.strip(), []).append(path.relative_to(ROOT).as_posix())
    assert hinted, "the scan found no install hints at all: the pattern is broken"
    unknown = {name: paths for name, paths in hinted.items() if name not in extras}
    assert unknown == {}, f"install hints name extras that pyproject.toml does not define: {unknown}"
