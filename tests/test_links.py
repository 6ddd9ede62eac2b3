"""Every link inside the repository resolves: relative file links point at files that exist, `#anchors` name a
heading of their target, and prose that sends the reader to a README section ("README, *Install*") names one.

Scanned: README.md, docs/*.md, notebooks/README.md, the notebooks' Markdown cells, and pyproject.toml (its
[project.urls] and its comments). Anchors follow the renderer of the target: GitHub's slugs for files outside docs/,
Python-Markdown's `toc` slugs (mkdocs.yml sets no `slugify`) for docs/ pages. `mkdocs build --strict` checks the
site's own links too; this test also covers the files the site does not build and runs without the docs extra.
"""

from __future__ import annotations

import json
import re
import tomllib
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
HTML_LINK = re.compile(r"<(?:a|img)\s[^>]*?(?:href|src)=\"([^\"]+)\"", re.IGNORECASE)
FENCE = re.compile(r"^(\s*)(```|~~~).*?^\1\2[^\S\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
# Prose pointing at a README section: README, *Install* / README section *Diagnostics* / README, "Supported
# versions"; nested sections as *Verifier rewards > Threat model*.
README_SECTION = re.compile(r"\bREADME(?:'s)?(?: section|,)\s+(?:\*([^*\n]+)\*|\"([^\"\n]+)\")")


def _documents() -> dict[Path, str]:
    """Each scanned file and its Markdown text (a notebook's Markdown cells, joined)."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "notebooks" / "README.md"]
    documents = {path: path.read_text() for path in paths}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        documents[path] = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return documents


def _without_code(text: str) -> str:
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _inline_text(heading: str) -> str:
    """A heading's text as rendered: links become their text, code and emphasis marks go."""
    heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", heading)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than '-' and '_' removed, spaces to '-'."""
    text = _inline_text(heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def mkdocs_slug(heading: str) -> str:
    """Python-Markdown toc's default slugify (mkdocs): ASCII only, punctuation removed, runs of '-'/space to '-'."""
    text = unicodedata.normalize("NFKD", _inline_text(heading)).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def headings(path: Path) -> list[str]:
    return [_inline_text(h).strip() for h in HEADING.findall(FENCE.sub("", path.read_text()))]


def anchors(path: Path) -> set[str]:
    """The anchors a Markdown file offers, numbered for repeats as each renderer does."""
    in_docs = path.parent == ROOT / "docs"
    slug, separator = (mkdocs_slug, "_") if in_docs else (github_slug, "-")
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = candidate = slug(heading)
        count = 0
        while candidate in found:
            count += 1
            candidate = f"{base}{separator}{count}"
        found.add(candidate)
    if in_docs:  # mkdocstrings: `::: module` blocks anchor every documented object by its dotted path
        for module in re.findall(r"^::: ([\w.]+)", path.read_text(), re.MULTILINE):
            found.add(module)
            found.update(f"{module}.{name}" for name in _members(path.read_text(), module))
    return found


def _members(page: str, module: str) -> list[str]:
    block = re.search(rf"^::: {re.escape(module)}\n(.*?)(?=^:::|\Z)", page, re.MULTILINE | re.DOTALL)
    members = re.search(r"members: \[(.*?)\]", block.group(1) if block else "", re.DOTALL)
    return [m.strip() for m in members.group(1).split(",")] if members else []


def _repository() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"].rstrip("/")


def _local_target(source: Path, target: str) -> tuple[Path, str] | None:
    """(file, anchor) for a link into this repository, or None for an external one."""
    repo_path = _repository().removeprefix("https://github.com/")
    into_repo = re.match(
        rf"https://(?:github\.com|colab\.research\.google\.com/github)/{re.escape(repo_path)}/(?:blob|tree)/main/(.*)",
        target,
    )
    if into_repo:
        file, _, anchor = into_repo.group(1).partition("#")
        return ROOT / file, anchor
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto:, ...
        return None
    file, _, anchor = target.partition("#")
    return (source.parent / file if file else source).resolve(), anchor


def broken_links() -> list[str]:
    problems = []
    for source, text in _documents().items():
        prose = _without_code(text)
        targets = INLINE_LINK.findall(prose) + REFERENCE_DEFINITION.findall(prose) + HTML_LINK.findall(prose)
        for target in targets:
            local = _local_target(source, target)
            if local is None:
                continue
            file, anchor = local
            where = f"{source.relative_to(ROOT)}: {target}"
            if not file.exists():
                problems.append(f"{where} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                problems.append(f"{where} (no heading with anchor #{anchor} in {file.relative_to(ROOT)})")
    # pyproject.toml's [project.urls]: an address inside the repository (e.g. .../blob/main/docs/x.md) must exist.
    for name, url in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"].items():
        local = _local_target(ROOT / "pyproject.toml", url)
        if local is not None and not local[0].exists():
            problems.append(f"pyproject.toml [project.urls] {name}: {url} (no such file)")
    return problems


def readme_section_references() -> list[tuple[str, str]]:
    """(file, section path) for each prose reference to a README section, pyproject.toml's comments included."""
    texts = {path.relative_to(ROOT).as_posix(): text for path, text in _documents().items()}
    texts["pyproject.toml"] = (ROOT / "pyproject.toml").read_text()
    return [
        (name, star or quoted)
        for name, text in texts.items()
        for star, quoted in README_SECTION.findall(text.replace("\n", " "))
    ]


def test_slugs_match_the_renderers():
    assert github_slug("Reward functions (`reward_funcs`)") == "reward-functions-reward_funcs"
    assert github_slug("Demo: DAPO teaches a tiny model on a CPU, nothing downloaded") == (
        "demo-dapo-teaches-a-tiny-model-on-a-cpu-nothing-downloaded"
    )
    assert mkdocs_slug("TRL's own metrics that matter here") == "trls-own-metrics-that-matter-here"
    assert mkdocs_slug("Round sizes: the planner") == "round-sizes-the-planner"
    assert mkdocs_slug("`DynamicSamplingExhausted`") == "dynamicsamplingexhausted"


def test_the_scan_sees_links_of_every_kind():
    documents = _documents()
    assert ROOT / "notebooks" / "dapo_gsm8k_lora.ipynb" in documents
    readme = _without_code(documents[ROOT / "README.md"])
    assert "docs/dynamic-sampling.md#screening-and-the-fixed-budget" in INLINE_LINK.findall(readme)
    assert any("colab.research.google.com/github" in t for t in REFERENCE_DEFINITION.findall(readme))
    assert _local_target(ROOT / "README.md", f"{_repository()}/blob/main/notebooks/x.ipynb") == (
        ROOT / "notebooks" / "x.ipynb",
        "",
    )
    assert "measured-efficiency" in anchors(ROOT / "docs" / "dynamic-sampling.md")
    assert ("README.md", "Install") not in readme_section_references()  # the README does not cite itself


def test_no_broken_intra_repository_links():
    problems = broken_links()
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_readme_sections_named_in_prose_exist():
    readme = headings(ROOT / "README.md")
    missing = [
        f"{name}: README section {section!r}"
        for name, section in readme_section_references()
        if not all(part.strip() in readme for part in section.split(">"))
    ]
    assert not missing, "no such README section:\n" + "\n".join(missing)
