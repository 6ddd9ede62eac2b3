"""A TRL user adopts the package without a clone: the wheel, installed into a fresh virtual environment, lists its
shipped recipes and trains one by name (`trl-dapo train --config tiny_cpu`) from a folder outside the checkout.

The wheel is built with `pip wheel --no-deps --no-build-isolation` from a copy of the sources (no build files left in
the checkout). The fresh venv sees this interpreter's site-packages (torch, TRL, ...) through a .pth line, which adds
the folder to sys.path without running the .pth files in it: the editable install of the checkout (setuptools'
``__editable__`` finder) stays out, so `trl_dapo_ext` can only come from the wheel. Nothing is downloaded; about
a minute on 2 cores, most of it importing torch twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "trl_dapo_ext", "reward_funcs")

pytestmark = pytest.mark.slow


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(the fresh venv's folder, the environment to run it in), with the wheel of this checkout installed."""
    work = tmp_path_factory.mktemp("wheel")
    assert not work.resolve().is_relative_to(ROOT)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copyfile(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip"]
    _run(
        [
            *pip,
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(work / "dist"),
            str(source),
        ],
        work,
        env,
    )
    (wheel,) = (work / "dist").glob("trl_dapo_ext-*.whl")

    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work, env)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], work, env).strip())
    ours = dict.fromkeys(sysconfig.get_path(kind) for kind in ("purelib", "platlib"))
    (site / "dependencies.pth").write_text("".join(f"{path}\n" for path in ours))
    _run([*pip, "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)], work, env)
    return venv, env


def test_the_installed_wheel_trains_a_shipped_recipe_by_name(fresh_venv, tmp_path):
    venv, env = fresh_venv
    python, cli = venv / "bin" / "python", venv / "bin" / "trl-dapo"
    where = json.loads(
        _run(
            [str(python), "-c", "import json, trl_dapo_ext, trl_dapo_ext.recipes as r; "
             "print(json.dumps([trl_dapo_ext.__file__, str(r.RECIPES_DIR)]))"],
            tmp_path, env,
        )
    )  # fmt: skip
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert [Path(path).parent for path in where] == [site / "trl_dapo_ext", site / "trl_dapo_ext"]
    assert not Path(where[0]).resolve().is_relative_to(ROOT)

    # The extras the recipes' install hints name (pip install 'trl-dapo-ext[vllm]') are in the wheel's metadata.
    extras = _run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m; print(m.metadata('trl-dapo-ext').get_all('Provides-Extra'))",
        ],
        tmp_path,
        env,
    )
    assert "'vllm'" in extras and "'quantization'" in extras

    listing = _run([str(cli), "recipes"], tmp_path, env)
    assert "tiny_cpu" in listing and "accelerate/zero2" in listing and str(site) in listing
    assert _run([str(cli), "recipes", "path", "accelerate/zero3"], tmp_path, env).strip() == where[1] + (
        "/accelerate/zero3.yaml"
    )

    # The recipe's model is the folder `trl-dapo demo` writes; here the demo's tiny model, untrained.
    make_model = (
        "from trl_dapo_ext.cli.demo import build_tokenizer_and_model\n"
        "tokenizer, model = build_tokenizer_and_model('tiny', seed=0)\n"
        "model.save_pretrained('runs/demo/final'); tokenizer.save_pretrained('runs/demo/final')\n"
    )
    _run([str(python), "-c", make_model], tmp_path, env)
    flags = ["--max_steps", "2", "--logging_steps", "1", "--disable_tqdm", "true", "--report", "false"]
    _run([str(cli), "train", "--config", "tiny_cpu", *flags, "--threads", "1"], tmp_path, env)
    state = json.loads((tmp_path / "runs" / "tiny-cpu" / "trainer_state.json").read_text())
    assert state["global_step"] == 2  # the recipe's own output_dir, model and data file (shipped beside it)
