"""Refuse dynamic sampling where re-padding would change what the model computes for a row.

Dynamic sampling concatenates rows of several generation rounds into one batch (`dynamic_sampling.assembly`), so
the prompts of a round with shorter prompts get more left padding than they had in their own round. Models that
number positions from the attention mask (RoPE models such as Qwen2 and Llama, ALiBi, OPT) compute the same logits
either way. Models that number positions ``0, 1, 2, ...`` whatever the padding (GPT-2 and other absolute position
embeddings) see every token of such a row at a shifted position in the loss's forward pass.

That only matters where TRL keeps log-probabilities computed in the round: the old policy's (``num_iterations > 1``,
generation not aligned with the optimizer step, or vLLM's importance-sampling correction) and the reference
model's (``beta != 0``). Their values come from the round's own padding, the loss's from the batch's, so the
ratio of an unchanged policy is not 1 (0.88 to 1.11 on a tiny GPT-2) and the KL term is off. :func:`check_left_padding`
measures the model once, with and without left padding, and refuses such a run with a message that says what to
change.

Example:
    >>> from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm
    >>> tokenizer = build_char_tokenizer()
    >>> left_padding_moves_logits(build_tiny_causal_lm(tokenizer), tokenizer.pad_token_id)  # Qwen2: RoPE
    False
"""

from __future__ import annotations

import sys
from typing import Any

import torch

PROBE_LENGTH = 6  # tokens of the probe sequence
PROBE_PADDING = 3  # left padding added to it
# Largest |difference| of log-probabilities that still counts as the same (float rounding of a differently shaped
# forward pass; a RoPE model in bfloat16 differs by ~1e-2). Absolute positions move them by 0.1 and more.
TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-6}
HALF_PRECISION_TOLERANCE = 5e-2


def keeps_round_log_probs(args: Any, beta: float) -> bool:
    """Whether TRL's batch carries log-probabilities computed in the generation round (TRL 1.16's condition in
    ``_generate_and_score_completions`` for ``old_per_token_logps``, and ``beta != 0`` for the reference model's).

    Example:
        >>> from types import SimpleNamespace
        >>> args = SimpleNamespace(gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        ...                        use_vllm=False, vllm_importance_sampling_correction=True)
        >>> keeps_round_log_probs(args, beta=0.0), keeps_round_log_probs(args, beta=0.04)
        (False, True)
    """
    generate_every = args.steps_per_generation * args.num_iterations
    old = args.gradient_accumulation_steps % generate_every != 0 or (
        args.use_vllm and args.vllm_importance_sampling_correction
    )
    pipelined = getattr(args, "dynamic_sampling_pipeline", False)  # pipelined screening computes them in each round
    return bool(old or pipelined or beta != 0.0)


def parameters_are_partitioned(model: torch.nn.Module) -> bool:
    """DeepSpeed ZeRO-3 keeps each parameter's data sharded outside the module until its engine gathers it."""
    return any(hasattr(parameter, "ds_id") for parameter in model.parameters())


@torch.no_grad()
def left_padding_moves_logits(model: torch.nn.Module, pad_token_id: int) -> bool:
    """Whether the model's log-probabilities for a sequence change when left padding (masked out) is added."""
    parameter = next(model.parameters())
    vocab = model.get_input_embeddings().num_embeddings
    # Ordinary tokens from the middle of the vocabulary: the first ids are special tokens in most vocabularies, whose
    # outlying activations alone move a deep RoPE model's float32 outputs by ~5e-3 under padding (SmolLM2-135M).
    step = max((vocab // 2) // PROBE_LENGTH, 1)
    candidates = [vocab // 4 + i * step for i in range(PROBE_LENGTH * 2)]
    tokens = [token for token in candidates if token != pad_token_id and 0 < token < vocab][:PROBE_LENGTH]
    ids = torch.tensor([tokens], device=parameter.device)
    padded = torch.cat([torch.full((1, PROBE_PADDING), pad_token_id, device=parameter.device), ids], dim=1)
    mask = (torch.arange(padded.shape[1], device=parameter.device) >= PROBE_PADDING).long().unsqueeze(0)
    was_training = model.training
    model.eval()  # no dropout
    _keep_4bit_layers_trainable(model)
    try:
        alone = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float().log_softmax(-1)
        shifted = model(input_ids=padded, attention_mask=mask).logits[:, PROBE_PADDING:].float().log_softmax(-1)
    finally:
        model.train(was_training)
    tolerance = TOLERANCE.get(parameter.dtype, HALF_PRECISION_TOLERANCE)
    return bool((alone - shifted).abs().max() > tolerance)


def _keep_4bit_layers_trainable(model: torch.nn.Module) -> None:
    """Put bitsandbytes' 4-bit layers back in training mode for the probe. On a CPU with AVX512-BF16, a `Linear4bit`
    called in eval mode without gradients repacks its weight into an inference-only layout for good
    (bitsandbytes' ``Linear4bit.forward``), and every training forward after it fails ("a view of a leaf Variable
    that requires grad is being used in an in-place operation"). Their training flag changes nothing else; dropout
    lives in its own modules, which stay in eval mode."""
    bitsandbytes = sys.modules.get("bitsandbytes")  # loaded already wherever a model holds 4-bit layers
    if bitsandbytes is None:
        return
    for module in model.modules():
        if isinstance(module, bitsandbytes.nn.Linear4bit):
            module.train()


def check_left_padding(model: torch.nn.Module, args: Any, beta: float, pad_token_id: int) -> None:
    """Raise ``ValueError`` for dynamic sampling with a model whose outputs move with left padding, where TRL keeps
    log-probabilities computed in the generation round (see the module docstring)."""
    if not keeps_round_log_probs(args, beta) or not left_padding_moves_logits(model, pad_token_id):
        return
    kept = (
        "the reference model's log-probabilities (beta != 0)" if beta != 0.0 else "the old policy's log-probabilities"
    )
    raise ValueError(
        f"dynamic_sampling with {type(model).__name__}: this model numbers positions without regard to left padding "
        "(absolute position embeddings, like GPT-2), and dynamic sampling re-pads the prompts of rows from different "
        f"generation rounds to one width. TRL keeps {kept} computed at each round's own width, so the loss would "
        "compare values computed at shifted positions (an unchanged policy's ratio would not be 1). Use a model "
        "with rotary or mask-based positions (Qwen2, Llama, ...), or set num_iterations=1, "
        "steps_per_generation <= gradient_accumulation_steps (a divisor), beta=0.0, no vLLM importance-sampling "
        "correction and no dynamic_sampling_pipeline, or set dynamic_sampling=False."
    )
