"""The local tokenizer and model builders used by the tests, the demo and the notebooks' tiny mode."""

from __future__ import annotations

from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm


def test_character_tokenizer_round_trips_without_spaces():
    tokenizer = build_char_tokenizer()
    ids = tokenizer("12+3= ab")["input_ids"]
    assert len(ids) == len("12+3= ab")
    assert tokenizer.decode(ids) == "12+3= ab"


def test_words_are_single_tokens_and_bos_is_prepended():
    tokenizer = build_char_tokenizer("0123456789+=# ", add_bos=True, words=("#### ",))
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("1+2=#### 3<eos>")["input_ids"])
    assert tokens == ["<bos>", "1", "+", "2", "=", "#### ", "3", "<eos>"]
    assert tokenizer.decode(tokenizer("#### 3")["input_ids"], skip_special_tokens=True) == "#### 3"
    # a lone '#' is still a character
    assert tokenizer.convert_ids_to_tokens(tokenizer("# 3")["input_ids"])[1:] == ["#", " ", "3"]


def test_model_is_seeded_and_sized():
    tokenizer = build_char_tokenizer()
    first = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=5)
    second = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=5)
    assert all((a == b).all() for a, b in zip(first.parameters(), second.parameters()))
    assert first.config.vocab_size == len(tokenizer)
    assert first.generation_config.eos_token_id == tokenizer.eos_token_id
