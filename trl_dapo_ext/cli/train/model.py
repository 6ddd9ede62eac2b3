"""The model side of a recipe: LoRA and quantization arguments, the tokenizer, and the checks that need no weights
(vLLM installed, the completion budget within the model's context)."""

from __future__ import annotations

import importlib.util
from typing import Any

from trl import ModelConfig

from trl_dapo_ext.config import DAPOConfig

from .arguments import TrainError, TrainScriptArguments


def _bitsandbytes_available() -> bool:
    return importlib.util.find_spec("bitsandbytes") is not None


def model_loading_kwargs(model_args: ModelConfig, training_args: DAPOConfig) -> dict[str, Any]:
    """Trainer keyword arguments for the model: `peft_config` (LoRA) and `quantization_config` (bitsandbytes).

    bitsandbytes is imported (checked) only when 4-bit or 8-bit loading is asked for. The model itself is loaded by
    TRL from `model_name_or_path` with `training_args.model_init_kwargs` (dtype, attention implementation, revision),
    so device placement under accelerate/DeepSpeed stays TRL's.
    """
    from trl import get_peft_config, get_quantization_config

    if model_args.load_in_4bit or model_args.load_in_8bit:
        if not _bitsandbytes_available():
            raise TrainError("load_in_4bit/load_in_8bit needs bitsandbytes: pip install 'trl-dapo-ext[quantization]'")
        # 4-bit (NF4/FP4) also runs on a CPU with bitsandbytes' CPU backend (CI's backend lane: bitsandbytes 0.50.2);
        # 8-bit training on a CPU is not tested here.
        if model_args.load_in_8bit and training_args.use_cpu:
            raise TrainError("load_in_8bit is only supported on a CUDA GPU here; use load_in_4bit on a CPU")
        if not model_args.use_peft:
            raise TrainError("a quantized model can only be trained with an adapter: set use_peft: true (QLoRA)")
    init_kwargs = dict(
        revision=model_args.model_revision,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    init_kwargs = {key: value for key, value in init_kwargs.items() if value is not None}
    training_args.model_init_kwargs = {**init_kwargs, **(training_args.model_init_kwargs or {})}
    return dict(peft_config=get_peft_config(model_args), quantization_config=get_quantization_config(model_args))


def load_tokenizer(model_args: ModelConfig, training_args: DAPOConfig, script_args: TrainScriptArguments):
    """The model's tokenizer, left-padded as TRL's generation needs; checks a chat template exists when used."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        padding_side="left",
        truncation_side="left",
    )
    if script_args.use_chat_template and not getattr(tokenizer, "chat_template", None):
        raise TrainError(
            f"{model_args.model_name_or_path} has no chat template; set use_chat_template: false for a base model"
        )
    return tokenizer


def check_generation_backend(training_args: DAPOConfig) -> None:
    """``use_vllm`` needs the vllm package: say so in one line before anything is loaded."""
    if training_args.use_vllm and importlib.util.find_spec("vllm") is None:
        raise TrainError(
            "use_vllm is true but vLLM is not installed: pip install 'trl-dapo-ext[vllm]' (a CUDA GPU), or set "
            "use_vllm: false (flag --use_vllm false) to generate with transformers"
        )


def check_context_length(model_args: ModelConfig, training_args: DAPOConfig) -> None:
    """The completion budget must fit in the model's context (``max_position_embeddings``), with room for a prompt.

    Past it the position embeddings run out: transformers only warns, and generation slows to a crawl or degrades.
    """
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            model_args.model_name_or_path,
            revision=model_args.model_revision,
            trust_remote_code=training_args.trust_remote_code,
        )
    except (OSError, ValueError):  # e.g. an adapter folder: loading the model will say what is wrong
        return
    context = getattr(config, "max_position_embeddings", None)
    budget = training_args.max_completion_length
    if isinstance(context, int) and budget is not None and budget >= context:
        raise TrainError(
            f"max_completion_length={budget} does not fit the model's context of {context} tokens "
            f"(max_position_embeddings of {model_args.model_name_or_path}), which must also hold the prompt: set "
            f"max_completion_length to {context} minus your longest prompt or less"
        )
