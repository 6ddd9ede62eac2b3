"""The documentation stays true to the repository: cited docs/ paths exist, generated tables are fresh, every
exception the package defines is in the troubleshooting page, and every link to the repository uses its one home."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".ipynb", ".txt", ".cfg"}
SKIP_DIRS = {".git", "site", "__pycache__", "build", "dist", "runs", "outputs"}

# Pages other branches deliver (named here so the README can link them before they are merged). Remove an entry once
# its page exists: the test below fails then, so none lingers.
PENDING_PAGES: set[str] = set()

# A docs/ path as the repository cites it (not part of a URL or of a longer path such as site/docs/...).
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]*[\w]")

# Exceptions that never reach the user as themselves (they become a reward of None or an `error` test outcome).
INTERNAL_EXCEPTIONS = {"UnsupportedTests", "NotPlainData"}


def _text_files():
    for path in ROOT.rglob("*"):
        if any(part in SKIP_DIRS or part.startswith((".venv", ".trl-")) for part in path.relative_to(ROOT).parts):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name == "Makefile"):
            yield path


def test_every_docs_path_named_in_the_repository_exists():
    cited: dict[str, set[str]] = {}
    for path in _text_files():
        for match in DOCS_PATH.findall(path.read_text(errors="replace")):
            cited.setdefault(match, set()).add(str(path.relative_to(ROOT)))
    assert "docs/metrics.md" in cited  # the scan sees the README's links
    missing = {p: sorted(files) for p, files in cited.items() if not (ROOT / p).exists() and p not in PENDING_PAGES}
    assert not missing, f"docs paths cited but absent: {missing}"
    merged = sorted(p for p in PENDING_PAGES if (ROOT / p).exists())
    assert not merged, f"{merged} exist now: remove them from PENDING_PAGES (and add them to mkdocs.yml's nav)"


def test_memory_page_rows_are_what_trl_dapo_estimate_computes():
    """docs/memory.md's first two rows, recomputed by the formulas `trl-dapo estimate` uses."""
    from trl_dapo_ext.preflight.memory import PUBLISHED, ModelShape, Recipe, estimate

    shape = ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-0.5B"])
    common = dict(use_peft=True, per_device_train_batch_size=16, gradient_accumulation_steps=4, prompt_length=200)
    common.update(max_completion_length=512, dynamic_sampling=True)
    page = (ROOT / "docs" / "memory.md").read_text()
    for recipe in ({**common, "dynamic_sampling_fixed_budget": True}, {**common, "use_vllm": True}):
        result = estimate(shape, Recipe.from_dict(recipe))
        row = " | ".join(f"{value:.2f}" for value in [*result.parts.values(), result.trainer_gib])
        assert row in page, f"docs/memory.md is stale: no row with {row}; rerun trl-dapo estimate"


def test_troubleshooting_names_every_exception_the_package_defines():
    pattern = re.compile(r"^class ([A-Z]\w*)\((?:[\w.]*Error|Exception|[\w.]*Exhausted)\)", re.M)
    defined = {
        name
        for package in ("trl_dapo_ext", "reward_funcs")
        for path in (ROOT / package).rglob("*.py")
        for name in pattern.findall(path.read_text())
    }
    assert {"DynamicSamplingExhausted", "SandboxUnavailable"} <= defined  # the scan finds classes
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    undocumented = sorted(name for name in defined - INTERNAL_EXCEPTIONS if f"`{name}" not in page)
    assert not undocumented, f"docs/troubleshooting.md lacks {undocumented}"


def test_links_to_the_repository_use_its_one_declared_home():
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    home = url.removeprefix("https://github.com/")
    link = re.compile(r"(?:colab\.research\.google\.com/github|github\.com)/([\w.-]+/trl-dapo-ext)\b")
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "notebooks").glob("*.ipynb")]
    found = {(str(path.relative_to(ROOT)), repo) for path in files for repo in link.findall(path.read_text())}
    assert any(path == "README.md" for path, _ in found)  # the README's Colab links are seen
    stale = sorted((path, repo) for path, repo in found if repo != home)
    fix = " ".join(f"-e 's|{repo}|{home}|g'" for repo in sorted({repo for _, repo in stale}))
    files_to_fix = " ".join(sorted({path for path, _ in stale}))
    assert not stale, f"links to another home than pyproject's {url}: {stale}; fix: sed -i {fix} {files_to_fix}"


def test_api_page_lists_every_recipe_reward_and_shows_defaults_as_values():
    import inspect

    import reward_funcs.math.answers as answers
    from trl_dapo_ext.cli.train.arguments import REWARD_FUNCS

    page = (ROOT / "docs" / "api.md").read_text()
    members = re.search(r"::: reward_funcs\n.*?members: \[(.*?)\]", page, re.S).group(1)
    assert set(REWARD_FUNCS) <= {member.strip() for member in members.split(",")}
    for function in (answers.make_math_reward, answers.answers_match, answers.MathReward.__init__):
        header = inspect.getsource(function).split('"""', 1)[0]  # the signature, as the API page renders it
        assert "DEFAULT_" not in header, function.__qualname__
        parameters = inspect.signature(function).parameters
        assert parameters["timeout_s"].default == answers.DEFAULT_TIMEOUT_S
        if "memory_limit_mb" in parameters:
            assert parameters["memory_limit_mb"].default == answers.DEFAULT_MEMORY_LIMIT_MB


def test_api_page_documents_every_public_name():
    import reward_funcs
    import trl_dapo_ext

    page = (ROOT / "docs" / "api.md").read_text()
    members = {
        m.strip() for m in re.search(r"::: reward_funcs\n.*?members: \[(.*?)\]", page, re.S).group(1).split(",")
    }
    assert {"MathReward", "MathFormatReward"} <= set(reward_funcs.__all__)
    assert not set(reward_funcs.__all__) - members, "docs/api.md's reward_funcs block lacks these"
    assert not [name for name in trl_dapo_ext.__all__ if name not in page], "docs/api.md lacks these"


def _make_docs_command() -> list[str]:
    """The Makefile's `docs` recipe as an argument list, with this interpreter for $(PY)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^docs:.*\n\t(.+)$", makefile, re.M).group(1)
    words = [w for w in recipe.split() if "=" not in w or w.startswith("-")]  # drop the VAR=value prefix
    return [sys.executable if w == "$(PY)" else w for w in words]


def test_make_docs_fails_on_a_warning(tmp_path):
    """`make docs`'s own command on a two-page site with a broken link: the build must fail and name the link.

    (mkdocs 1.6's --quiet drops warnings before --strict counts them, so such a build passed.)"""
    pytest.importorskip("mkdocs")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: planted\nnav:\n  - Home: index.md\nvalidation:\n  links:\n    not_found: warn\n"
    )
    command = [*_make_docs_command(), "-f", str(tmp_path / "mkdocs.yml"), "-d", str(tmp_path / "site")]
    assert command[1:5] == ["-m", "mkdocs", "build", "--strict"], command
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode != 0, f"{' '.join(command[1:])} passed a site with a broken link"
    assert "missing.md" in result.stdout + result.stderr


def test_every_page_that_advises_on_switching_it_on_links_the_decision():
    """The advice on switching dynamic sampling on lives in docs/choosing.md; the pages that talk about it link there
    instead of giving advice of their own."""
    pages = ["README.md", "docs/index.md", "docs/faq.md", "docs/dynamic-sampling.md", "docs/migration.md"]
    unlinked = [page for page in pages if "choosing.md" not in (ROOT / page).read_text()]
    assert not unlinked, f"{unlinked} do not link docs/choosing.md"
    assert "dynamic_sampling=True, overlong" not in (ROOT / "docs" / "index.md").read_text()  # no plain opt-in
