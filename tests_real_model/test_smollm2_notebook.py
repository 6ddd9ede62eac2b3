"""Both notebooks in tiny mode with the real model (``TRL_DAPO_TINY=1 TRL_DAPO_MODEL=smollm2``): the path a Colab
user takes (chat prompts through the model's own template, LoRA, DAPOTrainer, greedy pass@1, the report; the code
notebook's completions through the sandboxed ``code_reward``), executed with SmolLM2's BPE tokenizer and ChatML
template instead of the tiny character model. The tiny-model run of every notebook is tests/test_notebooks.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CELL_TIMEOUT_S = 600  # the training cell: two steps of a 135M model on a busy 2-core machine


NOTEBOOKS = {"dapo_gsm8k_lora.ipynb": "dapo-gsm8k-lora", "code_rl_lora.ipynb": "dapo-mbpp-lora"}  # -> OUTPUT_DIR


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_trains_smollm2_in_tiny_mode(name, smollm2_dir, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    # The kernel inherits this environment: tiny data with the real model, offline, this checkout first.
    for key, value in {
        "TRL_DAPO_TINY": "1",
        "TRL_DAPO_MODEL": "smollm2",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }.items():
        monkeypatch.setenv(key, value)
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError (with the cell and traceback) if any cell fails
    text = "".join(o.text for cell in notebook.cells for o in cell.get("outputs", []) if o.output_type == "stream")

    output = tmp_path / "runs" / NOTEBOOKS[name]
    assert "pass@1 before:" in text and "pass@1 after:" in text and "step    2" in text
    state = json.loads((output / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    adapter = json.loads((output / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == smollm2_dir  # the real model, not the tiny one
    tokenizer = json.loads((output / "tokenizer_config.json").read_text())
    assert tokenizer["eos_token"] == "<|im_end|>"
    assert (output / "report.png").is_file()


@pytest.fixture(autouse=True)
def _needs_the_notebook_tools():
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
