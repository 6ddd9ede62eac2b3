"""Tiny local models and tokenizers: no hub access, built in milliseconds.

Used by the test-suite, the CPU demo and the notebooks' tiny mode. The tokenizer is character level (one token per
character, decoded without spaces) so exact-match rewards work on decoded text.

Example:
    >>> tok = build_char_tokenizer()
    >>> model = build_tiny_causal_lm(tok, hidden_size=32, num_layers=1)
    >>> tok.decode(tok("12+3=")["input_ids"], skip_special_tokens=True)
    '12+3='
"""

from __future__ import annotations

import re
import string

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
