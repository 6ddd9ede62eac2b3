"""The Colab notebooks: committed clean, one documented tiny switch, and both run end to end in tiny mode.

Execution uses nbclient with the running interpreter's `python3` kernel (ipykernel), the environment variable
`TRL_DAPO_TINY=1` and this checkout on `PYTHONPATH`, in a temporary working directory, so the notebooks' relative
output folders land there and nothing is downloaded.

Marked `slow`, not `trainer`: the kernel is a separate process, so the test-only CPU shim that lets TRL 1.15 score
log-probabilities on a CPU (tests/trl115_cpu_shim.py) cannot reach it; the notebooks run on TRL 1.16 in CI.
"""

from __future__ import annotations

import json
import os
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
    badge = f"https://colab.research.google.com/github/OWNER/trl-dapo-ext/blob/main/notebooks/{name}.ipynb"
    assert badge in notebook.cells[0].source
    assert notebook.metadata["kernelspec"]["name"] == "python3"


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
