"""The Colab notebooks: committed clean, one documented tiny switch, and both run end to end in tiny mode.

Execution uses nbclient with the running interpreter's `python3` kernel (ipykernel), the environment variable
`TRL_DAPO_TINY=1` and this checkout on `PYTHONPATH`, in a temporary working directory, so the notebooks' relative
output folders land there and nothing is downloaded.

Marked `slow`, not `trainer`: the kernel is a separate process, so the test-only CPU shim that lets TRL 1.15 score
log-probabilities on a CPU (tests/trl115_cpu_shim.py) cannot reach it; the notebooks run on TRL 1.16 in CI.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {
    "dapo_gsm8k_lora": {"output_dir": "runs/dapo-gsm8k-lora", "reward": "math_reward"},
    "code_rl_lora": {"output_dir": "runs/dapo-mbpp-lora", "reward": "code_reward"},
}
CELL_TIMEOUT_S = 180


def _read(name: str):
    import nbformat

    return nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_committed_clean_with_one_tiny_switch(name):
    notebook = _read(name)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not cell.outputs and cell.execution_count is None for cell in code), "commit notebooks without outputs"
    assert 'TINY = os.environ.get("TRL_DAPO_TINY", "0") == "1"' in code[0].source  # the first code cell
    # The install cell never touches the network in tiny mode.
    install = next(cell for cell in code if "pip" in cell.source)
    assert "if TINY or" in install.source
    assert notebook.metadata["kernelspec"]["name"] == "python3"


def _sync_module():
    spec = importlib.util.spec_from_file_location("sync_repository", ROOT / "notebooks" / "sync_repository.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_one_repository_address_for_the_install_cell_and_the_badge(name):
    sync = _sync_module()
    repository = sync.repository()  # pyproject.toml, [project.urls] Repository: the one place to set it
    notebook = _read(name)
    install = next(cell for cell in notebook.cells if cell.cell_type == "code" and "pip" in cell.source)
    assignments = re.findall(r'^REPOSITORY = "([^"]*)"', install.source, re.MULTILINE)
    assert assignments == [repository]  # one variable, set once
    assert "git+{REPOSITORY}" in install.source and "github.com" not in install.source.replace(repository, "")
    badges = re.findall(
        r"https://colab\.research\.google\.com/github/[^)\s]+", "".join(c.source for c in notebook.cells)
    )
    assert badges == [sync.colab_url(repository, f"{name}.ipynb")]
    # The script that keeps them in step rewrites both from another address.
    moved = sync.synced(install.source + "\n" + notebook.cells[0].source, "https://github.com/someone/fork")
    assert 'REPOSITORY = "https://github.com/someone/fork"' in moved
    assert (
        sync.colab_url("https://github.com/someone/fork", f"{name}.ipynb") in moved and "github.com/OWNER" not in moved
    )
    assert sync.main(["--check"]) == 0  # the notebooks and the README's Colab links
    readme = (ROOT / "README.md").read_text()
    assert sync.colab_url(repository, f"{name}.ipynb") in readme
    assert sync.colab_url("https://github.com/someone/fork", f"{name}.ipynb") in sync.synced(
        readme, "https://github.com/someone/fork"
    )


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_install_cell_installs_before_torch_and_stops_for_a_restart(name, monkeypatch, capsys):
    install = next(cell for cell in _read(name).cells if cell.cell_type == "code" and "pip" in cell.source)
    assert "import torch" not in install.source  # torch is imported by later cells, after the install
    # A real address, past the placeholder check.
    source = re.sub(
        r'^REPOSITORY = "[^"]*"',
        'REPOSITORY = "https://github.com/someone/trl-dapo-ext"',
        install.source,
        flags=re.MULTILINE,
    )
    calls = []
    versions = {"torch": "2.9.0", "peft": "0.17.0"}

    class Dist:
        def __init__(self, name):
            self.metadata, self.version = {"Name": name}, versions[name]

    def fake_pip(command):
        calls.append(command)
        versions["torch"] = "2.13.0+vllm"  # vLLM's own torch build replaces the runtime's torch

    monkeypatch.setattr(importlib.util, "find_spec", lambda module, *a: None)  # trl_dapo_ext not importable
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [Dist(name) for name in versions])
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: {"torch": ["torch"], "peft": ["peft"]})
    monkeypatch.setattr(subprocess, "check_call", fake_pip)
    monkeypatch.setattr(shutil, "which", lambda program: None)  # no GPU here: no vllm extra
    with pytest.raises(SystemExit, match=r"already imported \(torch\): restart the runtime"):
        exec(source, {"TINY": False})  # torch is imported in this process, as in a kernel that imported it
    (command,) = calls
    assert command[-1] == "trl-dapo-ext[quantization] @ git+https://github.com/someone/trl-dapo-ext"

    # Nothing the kernel imported was replaced: no restart.
    monkeypatch.setattr(subprocess, "check_call", lambda command: calls.append(command))
    exec(source, {"TINY": False})
    assert "installed trl-dapo-ext" in capsys.readouterr().out
    # The placeholder address is refused with a sentence, not a failing git clone.
    with pytest.raises(SystemExit, match="REPOSITORY is still the placeholder"):
        exec(install.source, {"TINY": False})


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_completions_are_logged_every_n_steps_not_every_step(name):
    code = "\n".join(cell.source for cell in _read(name).cells if cell.cell_type == "code")
    assert "log_completions=True" not in code and "log_completions=False" in code
    assert "trainer.add_callback(CompletionsEvery(trainer, every=COMPLETIONS_EVERY))" in code
    assert re.search(r"^COMPLETIONS_EVERY = (\d+)", code, re.MULTILINE)[1] == "25"


# Where the GSM8K notebook's settings differ from its recipe on purpose (its last section names both).
RECIPE_DIFFERENCES = {"output_dir", "log_completions"}


def test_gsm8k_notebook_is_its_recipe_on_a_bf16_gpu_with_vllm():
    """The notebook says its configuration is recipes/gsm8k_lora_1gpu.yaml: every DAPOConfig key the recipe sets
    gets the same value from the notebook's parameter and configuration cells on a bf16 GPU with vLLM."""
    import yaml

    recipe_path = next(ROOT.glob("**/recipes/gsm8k_lora_1gpu.yaml"))  # wherever the recipes live
    recipe = yaml.safe_load(recipe_path.read_text())
    code = [cell.source for cell in _read("dapo_gsm8k_lora").cells if cell.cell_type == "code"]
    parameters, config = code[0], next(source for source in code if "args = DAPOConfig(" in source)
    namespace = {"os": os, "CUDA": True, "BF16": True, "DTYPE": "bfloat16"}
    exec(parameters.replace("import os\n", ""), namespace)  # noqa: S102 - the notebook's own cells
    assert namespace["TINY"] is False  # the full run, not tiny mode
    namespace["USE_VLLM"] = True
    exec(config.replace("from trl_dapo_ext import DAPOConfig\n", ""), {**namespace, "DAPOConfig": dict}, namespace)
    notebook = namespace["args"]
    assert notebook["model_init_kwargs"] == {"dtype": recipe["dtype"]}
    from trl_dapo_ext import DAPOConfig

    defaults = DAPOConfig(output_dir="unused", use_cpu=True)
    compared = [key for key in recipe if hasattr(defaults, key) and key not in RECIPE_DIFFERENCES]
    assert {"max_steps", "learning_rate", "overlong_buffer_length", "dynamic_sampling"} <= set(compared)
    differ = {
        key: (recipe[key], notebook.get(key, getattr(defaults, key)))
        for key in compared
        if recipe[key] != notebook.get(key, getattr(defaults, key))
    }
    assert not differ, f"the notebook and {recipe_path.relative_to(ROOT)} differ (recipe, notebook): {differ}"
    assert recipe["model_name_or_path"] == namespace["MODEL_ID"]


def _execute(name: str, workdir: Path):
    from nbclient import NotebookClient

    notebook = _read(name)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},  # the kernel's working directory
    )
    client.execute()  # raises CellExecutionError (with the cell and traceback) if any cell fails
    return notebook


def _outputs(notebook) -> tuple[str, list[str]]:
    text, mime = [], []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                text.append(output.text)
            elif output.output_type in ("display_data", "execute_result"):
                mime.extend(output.get("data", {}))
    return "".join(text), mime


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_end_to_end_in_tiny_mode(name, tmp_path, monkeypatch):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    # The kernel inherits this environment: tiny mode, offline, and this checkout ahead of any installed copy.
    monkeypatch.setenv("TRL_DAPO_TINY", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    notebook = _execute(name, tmp_path)
    text, mime = _outputs(notebook)

    expected = NOTEBOOKS[name]
    output = tmp_path / expected["output_dir"]
    assert "nothing to install" in text  # the install cell was skipped
    assert "pass@1 before:" in text and "pass@1 after:" in text
    assert "step    1" in text and "step    2" in text  # live progress, one line per step
    assert f"{expected['reward']} " in text
    state = json.loads((output / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    assert any("dynamic_sampling/rounds" in entry and "groups/frac_mixed" in entry for entry in state["log_history"])
    assert (output / "adapter_model.safetensors").is_file()  # the LoRA adapter
    report = output / "report.png"
    assert report.is_file() and report.stat().st_size > 10_000
    assert mime.count("image/png") >= 2  # the live reward curve and the inline report
    # Tiny mode logs the completions table every 2 steps: once, at step 2 (not at every step).
    assert sorted(path.name for path in (output / "completions").glob("*.parquet")) == ["completions_00002.parquet"]
