"""Tiny local models and tokenizers: no hub access, built in milliseconds.

Used by the test-suite, the CPU demo, the benchmarks and the notebooks' tiny mode; :func:`cpu_args` and
:func:`build_tiny_trainer` set up the tiny training runs they share. The tokenizer is character level (one token per
character, decoded without spaces) so exact-match rewards work on decoded text.

Example:
    >>> tok = build_char_tokenizer()
    >>> model = build_tiny_causal_lm(tok, hidden_size=32, num_layers=1)
    >>> tok.decode(tok("12+3=")["input_ids"], skip_special_tokens=True)
    '12+3='
"""

from __future__ import annotations

import inspect
import os
import re
import string
from pathlib import Path
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]
DEFAULT_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \n"

# Minimal chat template for conversational datasets: "u:<content>\n" per message, then "a:" for the reply.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}a:{% endif %}"
)


def build_char_tokenizer(
    alphabet: str = DEFAULT_ALPHABET, add_bos: bool = False, words: tuple[str, ...] = ()
) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer over `alphabet` with `<pad>`, `<eos>`, `<bos>`, `<unk>` specials.

    `add_bos=True` prepends `<bos>` to every encoded text (as Llama-style tokenizers do). `words` are multi-character
    strings that get one token each (e.g. the answer anchor `"#### "`), matched before single characters.

    Example:
        >>> tok = build_char_tokenizer("0123456789# ", words=("#### ",))
        >>> tok.convert_ids_to_tokens(tok("#### 42")["input_ids"])
        ['#### ', '4', '2']
    """
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + list(words) + sorted(set(alphabet)))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    pattern = "|".join([re.escape(word) for word in sorted(words, key=len, reverse=True)] + ["."])
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    # Fuse: decode "1","2" as "12", not "1 2" (a space-joining decoder breaks exact-match rewards).
    backend.decoder = decoders.Fuse()
    if add_bos:
        backend.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", vocab["<bos>"])]
        )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_causal_lm(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_positions: int = 256,
    seed: int = 0,
) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2-architecture causal LM sized for CPU tests (tied embeddings)."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


# --------------------------------------------------------------------------------------------- tiny training runs

# What every tiny CPU run sets: GRPOConfig/SFTConfig defaults (bf16, gradient checkpointing) are meant for GPUs.
CPU_ARGS: dict[str, Any] = dict(
    use_cpu=True,
    bf16=False,
    gradient_checkpointing=False,
    report_to="none",
    dataloader_num_workers=0,
)


def cpu_args(output_dir: str | os.PathLike, **overrides: Any) -> dict[str, Any]:
    """Config keyword arguments for a tiny run on the CPU: :data:`CPU_ARGS` and ``output_dir``, then ``overrides``.

    They suit `DAPOConfig`, `trl.GRPOConfig` and `trl.SFTConfig` alike.

    Example:
        >>> cpu_args("out", seed=3)["use_cpu"], cpu_args("out", seed=3)["seed"]
        (True, 3)
    """
    return {"output_dir": str(output_dir), **CPU_ARGS, **overrides}


def build_tiny_trainer(
    model: Any,
    reward_funcs: Any,
    train_dataset: Any,
    processing_class: Any,
    *,
    trainer_class: type | None = None,
    config_class: type | None = None,
    **config_kwargs: Any,
):
    """A trainer (`DAPOTrainer` unless ``trainer_class`` says otherwise, e.g. ``trl.GRPOTrainer`` with
    ``config_class=trl.GRPOConfig``) on a tiny model, configured by ``config_kwargs`` (start from :func:`cpu_args`).

    Keyword arguments the config does not take but the trainer does (``callbacks``, ``rollout_func``, ...) are
    passed to the trainer.
    """
    if trainer_class is None or config_class is None:
        from trl_dapo_ext import DAPOConfig, DAPOTrainer

        trainer_class = trainer_class or DAPOTrainer
        config_class = config_class or DAPOConfig
    trainer_params = inspect.signature(trainer_class.__init__).parameters
    trainer_kwargs = {key: config_kwargs.pop(key) for key in list(config_kwargs) if key in trainer_params}
    return trainer_class(
        model=model,
        reward_funcs=reward_funcs,
        args=config_class(**config_kwargs),
        train_dataset=train_dataset,
        processing_class=processing_class,
        **trainer_kwargs,
    )


def save_tiny_model(path: str | os.PathLike, **model_kwargs: Any) -> Path:
    """Save a tiny model and its character tokenizer (with its chat template) under ``path``, for the command line
    (``--model_name_or_path path``); ``model_kwargs`` go to :func:`build_tiny_causal_lm` (default: 32 wide, 1 layer)."""
    tokenizer = build_char_tokenizer()
    model_kwargs = {"hidden_size": 32, "num_layers": 1, **model_kwargs}
    model = build_tiny_causal_lm(tokenizer, **model_kwargs)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
