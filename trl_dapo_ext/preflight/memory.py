"""Generated tokens per step and GPU memory per training process: planning ESTIMATES from shapes, not measurements.

The formulas (bytes; GiB = 2**30 bytes), per training process:

* KV cache per stored position: ``2 (keys and values) x layers x KV heads x head dim x bytes per value``; a sequence
  stores its prompt and its completion. Without prefix sharing every answer stores its own prompt; with it (vLLM's
  prefix caching) the answers of one group share the prompt's positions once.
* weights: 2 bytes/parameter in bf16/fp16 (4 in fp32); 4-bit NF4 with double quantization ~0.52 bytes/parameter for
  the decoder's linear layers, embeddings (and an untied LM head) stay 16-bit.
* full fine-tuning with mixed-precision AdamW: 16 bytes/parameter (bf16 weights and gradients, 2 + 2; an fp32
  master copy, 4; two fp32 moments, 8); DeepSpeed ZeRO on N processes divides, per process, the optimizer state
  (the 12 bytes) from stage 1, the gradients from stage 2 and the weights from stage 3 by N
  (:func:`zero_bytes_per_process`);
* LoRA on the targeted linear layers: ``r x (in + out)`` parameters each, 16 bytes per parameter (fp32 weight,
  gradient, two Adam moments), divided the same way; under ZeRO-3 the frozen base weights are divided by N too;
* ZeRO-3 with ``ds3_gather_for_generation`` (TRL's default): TRL gathers the whole model on every process for each
  generation call, so the other processes' ``(N - 1) / N`` of the weights are counted as well;
* a reference model (``beta > 0`` without LoRA): 2 bytes/parameter;
* activations for a micro-batch of ``b`` sequences of ``T`` tokens: with gradient checkpointing one bf16 hidden
  state per layer (``b T h 2 L``) plus one layer recomputed, ``b T (4h + 4I) x 2 x 2``; without it, roughly
  ``b T L (10h + 4I) x 2``; plus 0.5 GiB for the chunk of TRL's fused log-prob LM head (it never holds ``b T V``
  logits);
* transformers generation: the KV cache of one generation call (the generation batch, times the dynamic-sampling
  round cap); vLLM colocate instead reserves ``vllm_gpu_memory_utilization`` of the GPU for its weights and cache;
* x1.15 allocator fragmentation, +0.8 GiB CUDA context.

Example (a Llama-3-8B-like shape: 32 layers, 8 KV heads of 128, bf16; docs/preflight.md works it through):
    >>> kv_bytes_per_position(32, 8, 128, 2) / 2**10  # KiB
    128.0
    >>> kv_cache_bytes(kv_bytes_per_position(32, 8, 128, 2), sequences=8, prompt=1024, completion=7168) / GIB
    8.0
    >>> kv_cache_bytes(131072, sequences=8, prompt=1024, completion=7168, share_prompt=True) / GIB
    7.125
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GIB = 2**30
ADAMW_MIXED_BYTES = 2 + 2 + 4 + 8  # bf16 weight + bf16 gradient + fp32 master + two fp32 moments
LORA_BYTES = 4 + 4 + 8  # fp32 adapter weight, gradient, two moments
NF4_BYTES = 0.52  # 4 bits + ~0.13 bits of double-quantized constants
LM_HEAD_CHUNK = 0.5 * GIB
FRAGMENTATION = 1.15
CUDA_CONTEXT = 0.8 * GIB
VLLM_MIN_CACHE = 2.0 * GIB  # the smallest useful vLLM cache assumed for a verdict
FITS, TIGHT = 0.8, 1.0  # share of the GPU's memory: "fits" below 80%, "tight" up to 100%

# Total memory per GPU as nvidia-smi reports it (MiB), and whether it computes in bf16.
GPUS: dict[str, tuple[int, bool]] = {
    "T4 16GB": (15_360, False),
    "L4 24GB": (23_034, True),
    "A100 40GB": (40_960, True),
    "A100 80GB": (81_920, True),
    "H100 80GB": (81_559, True),
    "H200 141GB": (143_771, True),
}

_DTYPE_BYTES = {"float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2}
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def kv_bytes_per_position(layers: int, kv_heads: int, head_dim: int, bytes_per_value: float) -> float:
    """KV cache of one stored token position: ``2 x layers x KV heads x head dim x bytes``.

    >>> kv_bytes_per_position(32, 8, 128, 2)
    131072
    """
    return 2 * layers * kv_heads * head_dim * bytes_per_value


def kv_cache_bytes(
    per_position: float, sequences: int, prompt: int, completion: int, share_prompt: bool = False
) -> float:
    """KV cache of ``sequences`` concurrent answers of ``prompt + completion`` positions.

    With ``share_prompt`` the answers share one copy of the prompt's positions (one prompt: a group generated
    together with prefix caching).

    >>> kv_cache_bytes(131072, sequences=1, prompt=0, completion=8192) / GIB
    1.0
    """
    if sequences < 0 or prompt < 0 or completion < 0:
        raise ValueError("sequences, prompt and completion must be >= 0")
    positions = prompt + sequences * completion if share_prompt else sequences * (prompt + completion)
    return positions * per_position


@dataclass(frozen=True)
class ModelShape:
    """The shapes of a decoder-only transformer that the formulas need (from its ``config.json``)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    name: str = "model"

    @classmethod
    def from_config(cls, config: Mapping[str, Any], name: str = "model") -> ModelShape:
        """From a Hugging Face config dict (Llama / Qwen / Mistral naming; a ``text_config`` is used when present).

        >>> shape = ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-0.5B-Instruct"])
        >>> round(shape.parameters() / 1e9, 3)
        0.494
        """
        cfg = dict(config.get("text_config") or config)
        missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads") if k not in cfg]
        if missing:
            raise ValueError(f"the model config has no {', '.join(missing)}: is it a decoder-only LM's config.json?")
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return cls(
            layers=int(cfg["num_hidden_layers"]),
            hidden=hidden,
            intermediate=int(cfg.get("intermediate_size") or 4 * hidden),
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            vocab=int(cfg.get("vocab_size") or 32_000),
            tied=bool(cfg.get("tie_word_embeddings", False)),
            name=name,
        )

    def embedding_parameters(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer of one block (gated MLP)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def parameters(self) -> int:
        """All parameters: embeddings, the LM head when untied, the blocks' linear layers and norms."""
        per_layer = sum(a * b for a, b in self.linear_shapes().values()) + 2 * self.hidden
        return self.embedding_parameters() + self.layers * per_layer + self.hidden

    def lora_parameters(self, r: int, targets: str | list[str] | None = "all-linear") -> int:
        """``r x (in + out)`` per targeted linear layer of every block (None: PEFT's default, q_proj and v_proj)."""
        shapes = self.linear_shapes()
        if targets is None:
            names = ["q_proj", "v_proj"]
        elif targets in ("all-linear", ["all-linear"]):
            names = list(shapes)
        else:
            names = [t for t in ([targets] if isinstance(targets, str) else targets) if t in shapes]
        return self.layers * sum(r * sum(shapes[n]) for n in names)


# Published shapes of the recipes' models, so that estimate works offline for them.
PUBLISHED: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-0.5B-Instruct": dict(
        num_hidden_layers=24,
        hidden_size=896,
        intermediate_size=4864,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151_936,
        tie_word_embeddings=True,
    ),  # fmt: skip
    "Qwen/Qwen2.5-1.5B-Instruct": dict(
        num_hidden_layers=28,
        hidden_size=1536,
        intermediate_size=8960,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151_936,
        tie_word_embeddings=True,
    ),  # fmt: skip
    "Qwen/Qwen2.5-7B-Instruct": dict(
        num_hidden_layers=28,
        hidden_size=3584,
        intermediate_size=18944,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152_064,
        tie_word_embeddings=False,
    ),  # fmt: skip
}
for _name in list(PUBLISHED):
    PUBLISHED[_name.removesuffix("-Instruct")] = PUBLISHED[_name]


@dataclass
class Recipe:
    """The settings of a recipe that drive cost and memory (YAML keys of ``trl-dapo train``)."""

    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    steps_per_generation: int | None = None
    num_generations: int = 8
    max_completion_length: int = 256
    prompt_length: int = 256  # tokens; not a recipe key: --prompt-length or the profile's mean
    dtype_bytes: float = 2
    bf16: bool = True
    load_in_4bit: bool = False
    use_peft: bool = False
    lora_r: int = 16
    lora_target_modules: Any = "all-linear"
    gradient_checkpointing: bool = True
    beta: float = 0.0
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    dynamic_sampling: bool = False
    dynamic_sampling_max_oversample: float = 4.0
    dynamic_sampling_fixed_budget: bool = False
    num_processes: int = 1
    zero_stage: int = 0
    ds3_gather_for_generation: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> Recipe:
        """From a recipe's YAML mapping; keys it does not set come from ``defaults`` (e.g. DAPOConfig's), then ours."""
        merged = {**(defaults or {}), **values}
        recipe = cls()
        for key in cls.__dataclass_fields__:
            if key in merged and merged[key] is not None and key not in ("dtype_bytes", "extra"):
                setattr(recipe, key, merged[key])
        dtype = str(merged.get("dtype") or merged.get("torch_dtype") or ("bfloat16" if recipe.bf16 else "float32"))
        if dtype == "auto":
            dtype = "bfloat16"
        if dtype not in _DTYPE_BYTES:
            raise ValueError(f"dtype {dtype!r} is not one of {sorted(_DTYPE_BYTES)}")
        recipe.dtype_bytes = _DTYPE_BYTES[dtype]
        if merged.get("fp16"):
            recipe.bf16 = False
        for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations"):
            if int(getattr(recipe, key)) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(recipe, key)}")
        return recipe

    @property
    def generation_batch(self) -> int:
        """Completions per process per generation call (TRL: batch size x steps_per_generation)."""
        steps = self.steps_per_generation or self.gradient_accumulation_steps
        return self.per_device_train_batch_size * steps

    @property
    def step_completions(self) -> int:
        """Completions per process per optimizer step (the update batch)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    @property
    def refills(self) -> bool:
        """Whether a step may generate beyond its batch (refill); at GRPO's budget it never does."""
        return self.dynamic_sampling and not self.dynamic_sampling_fixed_budget


@dataclass(frozen=True)
class Estimate:
    """GiB per component of one training process, generation cost per step, and the verdict per GPU."""

    parts: dict[str, float]
    trainer_gib: float
    tokens_per_step: float
    attempted_completions_per_step: float
    kv_per_position: float
    verdicts: dict[str, str]
    notes: list[str]


def zero_shards(stage: int, processes: int) -> tuple[int, int, int]:
    """Over how many processes DeepSpeed ZeRO ``stage`` divides (weights, gradients, optimizer state).

    Stage 1 partitions the optimizer state, stage 2 the gradients too, stage 3 the parameters too (Rajbhandari et
    al. 2020, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, Sec. 5); stage 0 is plain DDP.

    >>> [zero_shards(stage, 8) for stage in range(4)]
    [(1, 1, 1), (1, 1, 8), (1, 8, 8), (8, 8, 8)]
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"the ZeRO stage must be 0, 1, 2 or 3, got {stage}")
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    return (processes if stage >= 3 else 1, processes if stage >= 2 else 1, processes if stage >= 1 else 1)


def zero_bytes_per_process(
    parameters: float,
    stage: int,
    processes: int,
    weight_bytes: float = 2,
    gradient_bytes: float = 2,
    optimizer_bytes: float = ADAMW_MIXED_BYTES - 4,
) -> dict[str, float]:
    """Bytes of trained ``parameters`` held by one process under ZeRO ``stage`` on ``processes`` processes:
    ``weights / N3 + gradients / N2 + optimizer state / N1``, where N_k is ``processes`` from stage k on, else 1.

    The defaults are mixed-precision AdamW (2 + 2 + 12 bytes/parameter). The ZeRO paper's worked example (its
    Figure 1: 7.5B parameters, 64 processes), in GB of 10^9 bytes:

    >>> [round(sum(zero_bytes_per_process(7.5e9, stage, 64).values()) / 1e9, 1) for stage in range(4)]
    [120.0, 31.4, 16.6, 1.9]
    """
    weights, gradients, optimizer = zero_shards(stage, processes)
    return {
        "weights": parameters * weight_bytes / weights,
        "gradients": parameters * gradient_bytes / gradients,
        "optimizer": parameters * optimizer_bytes / optimizer,
    }


def tokens_per_step(completions: float, mean_completion_length: float) -> float:
    """Generated tokens per step: completions (prompts x G) times the mean completion length.

    >>> tokens_per_step(64 * 8, 1000)  # 64 prompts, G = 8, 1,000 tokens each
    512000
    """
    return completions * mean_completion_length


def estimate(
    shape: ModelShape,
    recipe: Recipe,
    mean_completion_length: float | None = None,
    retention: float | None = None,
) -> Estimate:
    """Memory per training process and generation cost of one step (see the module docstring for the formulas).

    ``mean_completion_length`` (tokens, e.g. from ``trl-dapo profile``) sets the expected cost; memory always
    assumes ``max_completion_length``. ``retention`` (informative share of groups) sets the dynamic-sampling cost.

    >>> shape = ModelShape.from_config(PUBLISHED["Qwen/Qwen2.5-7B"])
    >>> est = estimate(shape, Recipe(use_peft=False))  # full fine-tuning, mixed-precision AdamW
    >>> round((est.parts["weights"] + est.parts["optimizer and gradients"]) * GIB / shape.parameters(), 6)
    16.0
    """
    notes: list[str] = []
    parts = _model_bytes(shape, recipe)
    parts["activations"] = _activation_bytes(shape, recipe) + LM_HEAD_CHUNK
    per_position = kv_bytes_per_position(shape.layers, shape.kv_heads, shape.head_dim, recipe.dtype_bytes)
    parts["KV cache"], vllm_need = _generation_bytes(shape, recipe, per_position, notes)
    trainer = sum(parts.values()) * FRAGMENTATION + CUDA_CONTEXT
    verdicts = {
        gpu: _verdict(trainer, vllm_need, recipe, mib * 2**20, has_bf16) for gpu, (mib, has_bf16) in GPUS.items()
    }
    length = mean_completion_length if mean_completion_length is not None else recipe.max_completion_length
    if mean_completion_length is None:
        notes.append("tokens per step assume every completion reaches max_completion_length (give a profile)")
    attempted = float(recipe.step_completions)
    if recipe.refills and retention is not None and retention > 0:
        attempted = recipe.step_completions / retention
        notes.append(f"dynamic sampling at retention {retention:.2f}: ~{1 / retention:.2f}x the batch generated")
    elif recipe.refills:
        notes.append("dynamic sampling: generation grows by 1/retention (give a profile for the retention)")
    elif recipe.dynamic_sampling:
        notes.append("dynamic sampling at GRPO's budget: at most the batch generated per step")
    return Estimate(
        parts={k: v / GIB for k, v in parts.items()},
        trainer_gib=trainer / GIB,
        tokens_per_step=tokens_per_step(attempted * recipe.num_processes, length),
        attempted_completions_per_step=attempted * recipe.num_processes,
        kv_per_position=per_position,
        verdicts=verdicts,
        notes=notes,
    )


def _model_bytes(shape: ModelShape, recipe: Recipe) -> dict[str, float]:
    """Weights, and what training them costs per process: the adapter with its optimizer (LoRA), or gradients and
    AdamW state (full fine-tuning), divided by ZeRO (:func:`zero_bytes_per_process`), plus a reference model for
    ``beta > 0``."""
    params = shape.parameters()
    embeddings = shape.embedding_parameters()
    if recipe.load_in_4bit:
        weights = (params - embeddings) * NF4_BYTES + embeddings * 2
    else:
        weights = params * recipe.dtype_bytes
    weight_shards = zero_shards(recipe.zero_stage, recipe.num_processes)[0]
    parts: dict[str, float] = {"weights": weights / weight_shards}  # ZeRO-3 partitions frozen weights as well
    if weight_shards > 1 and recipe.ds3_gather_for_generation:
        # TRL gathers the whole model on every process for each generation call (and each vLLM weight sync).
        parts["ZeRO-3 gathered weights"] = weights - weights / weight_shards
    if recipe.use_peft:
        adapter = shape.lora_parameters(recipe.lora_r, recipe.lora_target_modules)
        lora = zero_bytes_per_process(adapter, recipe.zero_stage, recipe.num_processes, 4, 4, LORA_BYTES - 8)
        parts["LoRA and optimizer"] = sum(lora.values())
        return parts
    if recipe.load_in_4bit:
        raise ValueError("a 4-bit model can only be trained with an adapter: set use_peft: true (QLoRA)")
    # Mixed-precision AdamW: 16 bytes/parameter in all; the 16-bit weights are counted above.
    trained = zero_bytes_per_process(params, recipe.zero_stage, recipe.num_processes)
    parts["optimizer and gradients"] = trained["gradients"] + trained["optimizer"]
    if recipe.beta > 0:
        parts["reference model"] = params * 2
    return parts


def _activation_bytes(shape: ModelShape, recipe: Recipe) -> float:
    """Activations of one micro-batch of prompt + completion tokens (checkpointed: one hidden state per layer)."""
    b = recipe.per_device_train_batch_size
    tokens = recipe.prompt_length + recipe.max_completion_length
    if recipe.gradient_checkpointing:
        activations = b * tokens * shape.hidden * 2 * shape.layers
        return activations + b * tokens * (4 * shape.hidden + 4 * shape.intermediate) * 2 * 2
    return b * tokens * shape.layers * (10 * shape.hidden + 4 * shape.intermediate) * 2


def _generation_bytes(shape: ModelShape, recipe: Recipe, per_position: float, notes: list[str]) -> tuple[float, float]:
    """(KV cache in the training process, what vLLM needs at least): transformers generation keeps the KV cache of
    a whole round in the trainer; vLLM holds its own weights and cache (a note says how much)."""
    # A fixed budget never generates more than plain GRPO's batch in one call; refill's rounds reach max_oversample.
    round_cap = recipe.dynamic_sampling_max_oversample if recipe.refills else 1.0
    sequences = math.ceil(recipe.generation_batch * round_cap)
    if not recipe.use_vllm:
        return kv_cache_bytes(per_position, sequences, recipe.prompt_length, recipe.max_completion_length), 0.0
    params = shape.parameters()
    # vLLM holds its own 16-bit weights and at least ~2 GiB of KV cache; with less cache than one round needs it
    # runs fewer answers at once (slower, not out of memory). Prompts are shared per group (prefix caching).
    groups = math.ceil(sequences / recipe.num_generations)
    cache = groups * kv_cache_bytes(
        per_position, recipe.num_generations, recipe.prompt_length, recipe.max_completion_length, True
    )
    where = "on this GPU" if recipe.vllm_mode == "colocate" else "on the vLLM server's GPU, not counted here"
    notes.append(
        f"vLLM ({recipe.vllm_mode}, {where}): 16-bit weights {params * 2 / GIB:.2f} GiB; the KV cache of a whole round "
        f"({sequences} answers, prompts shared per group) is {cache / GIB:.2f} GiB, below that vLLM runs fewer "
        "answers at once"
    )
    return 0.0, params * 2 + VLLM_MIN_CACHE


def _verdict(trainer: float, vllm_need: float, recipe: Recipe, capacity: float, has_bf16: bool) -> str:
    """Whether one training process (plus colocated vLLM's share) fits a GPU of ``capacity`` bytes."""
    need = trainer
    extra = ""
    if recipe.use_vllm and recipe.vllm_mode == "colocate":
        share = max(recipe.vllm_gpu_memory_utilization * capacity, vllm_need)
        need += share
        if share > recipe.vllm_gpu_memory_utilization * capacity:
            extra = f", vllm_gpu_memory_utilization >= {share / capacity:.2f}"
    if recipe.bf16 and recipe.dtype_bytes == 2 and not has_bf16:
        return "no (no bf16: use fp16)"
    for verdict, limit in (("fits", FITS), ("tight", TIGHT)):
        if need <= limit * capacity:
            return f"{verdict} (~{need / GIB:.0f}{extra})"
    return f"no (~{need / GIB:.0f})"
