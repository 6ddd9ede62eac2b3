"""``trl-dapo profile``'s sampling: prompt token ids in, K samples per prompt out, as TRL's GRPOTrainer samples
(transformers ``generate``, or vLLM's offline engine), and the policy it samples from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .arguments import ProfileError


@dataclass(frozen=True)
class Sample:
    """One sampled completion, cut as TRL cuts it."""

    ids: list[int]  # completion tokens up to and including the first EOS (what TRL keeps)
    truncated: bool  # no EOS within max_completion_length


def tokenize_prompts(tokenizer, prompts: Sequence[Any]) -> list[list[int]]:
    """Prompt token ids as TRL's GRPOTrainer makes them: the chat template with a generation prompt for messages,
    the tokenizer (with its special tokens) for text."""
    if prompts and isinstance(prompts[0], list):
        out = tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True, return_dict=True)[
            "input_ids"
        ]
        return [list(ids) for ids in out]
    return [list(ids) for ids in tokenizer(list(prompts))["input_ids"]]


def _eos_ids(tokenizer, model=None) -> list[int]:
    ids = {tokenizer.eos_token_id}
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in config_eos if isinstance(config_eos, list) else [config_eos]:
        ids.add(value)
    return sorted(i for i in ids if i is not None)


def _cut(ids: Sequence[int], eos: Sequence[int], max_length: int) -> Sample:
    ids = [int(i) for i in ids]
    for position, token in enumerate(ids):
        if token in eos:
            return Sample(ids[: position + 1], truncated=False)
    return Sample(ids[:max_length], truncated=True)


def transformers_generator(model, tokenizer, options) -> Callable[[list[list[int]], int], list[list[Sample]]]:
    """Sampling with ``model.generate`` and the generation kwargs TRL's GRPOTrainer builds."""
    import torch
    from transformers import GenerationConfig

    eos = _eos_ids(tokenizer, model)
    config = GenerationConfig(
        max_new_tokens=options.max_completion_length,
        do_sample=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=options.top_k,
        min_p=options.min_p,
        repetition_penalty=options.repetition_penalty,
    )
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]

    def generate(prompt_ids: list[list[int]], k: int) -> list[list[Sample]]:
        repeated = [ids for ids in prompt_ids for _ in range(k)]
        width = max(len(ids) for ids in repeated)
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in repeated], device=device)
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in repeated], device=device)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
        samples = [_cut(row[width:].tolist(), eos, options.max_completion_length) for row in out]
        return [samples[i * k : (i + 1) * k] for i in range(len(prompt_ids))]

    return generate


def vllm_generator(model_path: str, tokenizer, options) -> Callable[[list[list[int]], int], list[list[Sample]]]:
    """Sampling with vLLM's offline engine (``n=K`` samples per prompt, the same sampling settings)."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_path, seed=options.seed, dtype=options.dtype or "auto")
    eos = _eos_ids(tokenizer)

    def generate(prompt_ids: list[list[int]], k: int) -> list[list[Sample]]:
        params = SamplingParams(
            n=k,
            temperature=options.temperature,
            top_p=options.top_p,
            top_k=options.top_k if options.top_k and options.top_k > 0 else -1,
            min_p=options.min_p or 0.0,
            repetition_penalty=options.repetition_penalty,
            max_tokens=options.max_completion_length,
        )
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        return [
            [_cut(list(c.token_ids), eos, options.max_completion_length) for c in output.outputs] for output in outputs
        ]

    return generate


def load_policy(options):
    """Tokenizer (left-padded, as TRL) and, for the transformers backend, the model on the GPU when there is one."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_dapo_ext.cli.train import TrainError, check_local_path

    try:
        check_local_path(options.model, "--model")
    except TrainError as error:
        raise ProfileError(str(error)) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(options.model, padding_side="left")
    except (OSError, ValueError) as error:
        raise ProfileError(f"cannot load the tokenizer of {options.model!r}: {error}") from None
    if options.use_chat_template and not getattr(tokenizer, "chat_template", None):
        raise ProfileError(f"{options.model} has no chat template; pass --use-chat-template false for a base model")
    backend = options.backend
    if backend == "auto":
        import importlib.util

        import torch

        backend = "vllm" if importlib.util.find_spec("vllm") and torch.cuda.is_available() else "transformers"
    if backend == "vllm":
        try:
            return tokenizer, vllm_generator(options.model, tokenizer, options), backend
        except ImportError:
            raise ProfileError("--backend vllm needs vLLM: pip install 'trl-dapo-ext[vllm]'") from None
    import torch

    try:
        model = AutoModelForCausalLM.from_pretrained(options.model, dtype=options.dtype or "auto")
    except (OSError, ValueError) as error:
        raise ProfileError(f"cannot load the model {options.model!r}: {error}") from None
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    return tokenizer, transformers_generator(model, tokenizer, options), backend
