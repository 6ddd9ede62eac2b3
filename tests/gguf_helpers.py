"""A tiny Llama written as a GGUF file (and packed into a wheel), so that the GGUF path of `trl_dapo_ext.models`
runs in the main suite in a second, without the 93 MB SmolLM2 wheel. Also run by the backend lane (the other
transformers release CI installs)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

# A byte-level BPE vocabulary with ChatML specials, like SmolLM2's (ids 0, 1, 2 as there).
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *"abcdefghijklmnopqrstuvwxyz0123456789+=", "Ġ", "12", "+="]
# Two merges, not one: transformers 5.17's GGUF reader turns a one-element array into a scalar.
MERGES = ["1 2", "+ ="]
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
HEADS, KV_HEADS = 4, 2


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(TOKENS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def _llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    # llama.cpp stores q/k rows interleaved for its rotary layout; transformers undoes it when loading.
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def write_tiny_gguf(path: Path, model: LlamaForCausalLM) -> Path:
    """``model``'s float32 weights, its config and a small BPE tokenizer with a chat template, as llama.cpp writes a
    Llama GGUF (only float32 tensors: the dequantisation itself is transformers' and gguf's)."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(TOKENS))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(TOKENS)
    writer.add_token_types([3, 3, 3] + [1] * (len(TOKENS) - 3))  # 3: control tokens
    writer.add_token_scores([0.0] * len(TOKENS))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":  # tied to the embedding, which GGUF stores once
            continue
        array = tensor.detach().numpy().astype(np.float32)
        if name.endswith("q_proj.weight"):
            array = _llama_cpp_permute(array, HEADS)
        elif name.endswith("k_proj.weight"):
            array = _llama_cpp_permute(array, KV_HEADS)
        base, suffix = name.rsplit(".", 1)
        writer.add_tensor(f"{names.get_name(base)}.{suffix}", array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_wheel(path: Path, member: str, gguf_file: Path) -> Path:
    """A wheel-shaped zip holding ``gguf_file`` at ``member`` (all that `models.convert_wheel` reads of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.write(gguf_file, member)
    return path
