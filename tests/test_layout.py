"""The package layout's import rules: the pure math imports torch only; the public API is small."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import trl_dapo_ext

ROOT = Path(__file__).resolve().parents[1]
CORE_MODULES = sorted(
    f"trl_dapo_ext.core.{path.stem}"
    for path in (ROOT / "trl_dapo_ext" / "core").glob("*.py")
    if path.stem != "__init__"
)


# Dynamic sampling's decisions, testable without a model: the sampler and every module it builds on.
PURE_DYNAMIC_SAMPLING_MODULES = [
    f"trl_dapo_ext.dynamic_sampling.{name}"
    for name in (
        "sampler",
        "counts",
        "messages",
        "profile_table",
        "planner",
        "history",
        "stream",
        "screening",
        "screen_plan",
    )
]


def test_the_pure_modules_import_neither_trl_nor_transformers():
    """The core math and the sampler side of dynamic sampling, imported one after another in one fresh interpreter:
    after each import the heavy libraries must still be absent, so the first module that pulls one in is named."""
    code = (
        "import importlib, sys\n"
        f"for module in {CORE_MODULES + PURE_DYNAMIC_SAMPLING_MODULES!r}:\n"
        "    importlib.import_module(module)\n"
        "    heavy = sorted(\n"
        "        m for m in sys.modules if m.split('.')[0] in ('trl', 'transformers', 'accelerate', 'datasets')\n"
        "    )\n"
        "    print(module, heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(CORE_MODULES) + len(PURE_DYNAMIC_SAMPLING_MODULES)
    assert all(line.endswith(" []") for line in lines), [line for line in lines if not line.endswith(" []")][:1]


def test_core_modules_are_found():
    assert {"advantages", "groups", "metrics", "overlong"} <= {name.rsplit(".", 1)[1] for name in CORE_MODULES}


def test_public_api_is_the_config_the_trainer_and_the_exceptions():
    exceptions = {name for name in trl_dapo_ext.__all__ if name.endswith(("Error", "Exhausted", "Key"))}
    assert set(trl_dapo_ext.__all__) - exceptions == {"DAPOConfig", "DAPOTrainer", "GRPOConfig", "GRPOTrainer"}
    for name in exceptions:
        assert issubclass(getattr(trl_dapo_ext, name), Exception), name
    assert {"DynamicSamplingExhausted", "RewardFunctionError", "TRLCompatibilityError"} <= exceptions
    assert {"UnsupportedBackendError", "MissingColumnError"} <= exceptions


def _listed_modules(text: str) -> tuple[str, set[str]]:
    """The ```text block after the layout heading, and the module paths its indented tree names."""
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    listed, stack = set(), []
    for line in block.splitlines():
        depth = (len(line) - len(line.lstrip())) // 2
        stack = stack[:depth] + [line.split()[0]]
        if stack[-1].endswith(".py"):
            listed.add("".join(stack))
    return block, listed


def test_the_layout_in_the_docs_matches_the_tree():
    """docs/layout.md names every module of both packages, and no module that does not exist (the README links it)."""
    root = Path(__file__).resolve().parents[1]
    modules = {
        str(p.relative_to(root)) for pkg in ("trl_dapo_ext", "reward_funcs") for p in (root / pkg).rglob("*.py")
    }
    _, docs_listed = _listed_modules((root / "docs" / "layout.md").read_text())
    assert docs_listed == modules, (sorted(modules - docs_listed), sorted(docs_listed - modules))
    assert "(docs/layout.md)" in (root / "README.md").read_text()  # one tree, linked from the README


MAX_FUNCTION_LINES = 60
MAX_README_LINES = 250
# Long functions whose rewrite belongs to other work; each may not grow. None today.
LONG_FUNCTIONS: dict[str, int] = {}


def test_functions_and_the_readme_stay_short():
    """Every function of both packages fits in MAX_FUNCTION_LINES (split a longer one by job), and the README in
    MAX_README_LINES (details go to docs/)."""
    import ast

    long = {}
    for package in ("trl_dapo_ext", "reward_funcs"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    name = f"{path.relative_to(ROOT).as_posix()}:{node.name}"
                    if lines > LONG_FUNCTIONS.get(name, MAX_FUNCTION_LINES):
                        long[name] = lines
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= MAX_README_LINES, f"README.md has {len(readme)} lines (at most {MAX_README_LINES})"
