"""Back-of-the-envelope peak GPU memory of the notebooks' and recipes' settings: ESTIMATES, not measurements.

Run ``python docs/memory_estimate.py`` to print the table in docs/memory.md. Nothing is imported
beyond the standard library; the model shapes are the published Qwen2.5 configs. The formulas, per process:

* weights: 2 bytes/parameter in bf16/fp16; 4-bit NF4 with double quantization: ~0.52 bytes/parameter for the
  decoder's linear layers (4 bits + ~0.13 bits of quantization constants), embeddings and an untied LM head stay
  16-bit (bitsandbytes does not quantize them);
* LoRA on every linear layer of every block: r * (in + out) parameters per layer, 16 bytes each (fp32 weight,
  gradient and two Adam moments);
* activations with gradient checkpointing, for a micro-batch of b sequences of T = prompt + completion tokens: one
  bf16 hidden state per layer kept (b*T*h*2*layers) plus one layer recomputed during backward, counted as 4h + 4I
  values per token for its outputs and again for their gradients (b*T*(4h+4I)*2*2), plus 0.5 GiB for the chunk
  buffer of TRL's fused log-prob LM head (it never materialises the full b*T*vocab logits);
* generation with transformers: the KV cache of one generation round, n sequences of T tokens:
  n*T*layers*2*kv_heads*head_dim*2 bytes. A dynamic-sampling round can be up to `dynamic_sampling_max_oversample`
  times the generation batch (the planner's largest round), and we assume that worst case (the notebooks and the
  T4 recipe cap it at 2 with transformers generation);
* vLLM colocate instead reserves `vllm_gpu_memory_utilization` x the GPU's memory for its own copy of the weights,
  its KV cache and CUDA graphs; the trainer then holds no KV cache;
* plus 15% allocator fragmentation and 0.8 GiB CUDA context (kernels, cuBLAS workspace).

Unknowns that can move the real number by a GiB or more: the fused LM head's chunk size, the attention kernel's
workspace, transient copies during LoRA weight sync to vLLM, and PyTorch's caching allocator. A GPU run of the
GSM8K recipe should replace these figures with `train_summary.json`'s `peak_memory_gib`.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class Shape:
    name: str
    params: float  # total parameters
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool


QWEN = {
    "0.5B": Shape("Qwen2.5-0.5B", 0.494e9, 24, 896, 4864, 2, 64, 151_936, True),
    "1.5B": Shape("Qwen2.5-1.5B", 1.544e9, 28, 1536, 8960, 2, 128, 151_936, True),
    "7B": Shape("Qwen2.5-7B", 7.616e9, 28, 3584, 18944, 4, 128, 152_064, False),
}


@dataclass(frozen=True)
class Setting:
    label: str
    model: str
    four_bit: bool
    micro_batch: int  # per_device_train_batch_size (completions per forward/backward)
    generation_batch: int  # completions generated per optimizer step without refill
    oversample: float  # largest dynamic-sampling round, as a multiple of the generation batch
    prompt_tokens: int
    completion_tokens: int
    vllm: bool
    lora_r: int = 16


def embedding_params(shape: Shape) -> float:
    return shape.vocab * shape.hidden * (1 if shape.tied else 2)


def lora_params(shape: Shape, r: int) -> float:
    h, i, kv = shape.hidden, shape.intermediate, shape.kv_heads * shape.head_dim
    per_layer = r * ((h + h) * 2 + (h + kv) * 2 + (h + i) * 3)  # q, o; k, v; gate, up, down
    return per_layer * shape.layers


def estimate(setting: Setting) -> dict[str, float]:
    """GiB per component of one training process, and the total before vLLM's share."""
    shape = QWEN[setting.model]
    embeddings = embedding_params(shape)
    if setting.four_bit:
        weights = (shape.params - embeddings) * 0.52 + embeddings * 2
    else:
        weights = shape.params * 2
    adapter = lora_params(shape, setting.lora_r) * 16
    tokens = setting.prompt_tokens + setting.completion_tokens
    checkpoints = setting.micro_batch * tokens * shape.hidden * 2 * shape.layers
    recompute = setting.micro_batch * tokens * (4 * shape.hidden + 4 * shape.intermediate) * 2 * 2
    lm_head_chunk = 0.5 * GIB
    activations = checkpoints + recompute + lm_head_chunk
    kv_per_token = shape.layers * 2 * shape.kv_heads * shape.head_dim * 2
    sequences = setting.generation_batch * setting.oversample
    kv_cache = 0.0 if setting.vllm else sequences * tokens * kv_per_token
    subtotal = weights + adapter + activations + kv_cache
    total = subtotal * 1.15 + 0.8 * GIB
    parts = dict(weights=weights, adapter=adapter, activations=activations, kv_cache=kv_cache, total=total)
    return {key: value / GIB for key, value in parts.items()}


SETTINGS = [
    Setting("0.5B LoRA, transformers generation (notebook on a T4)", "0.5B", False, 16, 64, 2.0, 200, 512, False),
    Setting("0.5B LoRA, vLLM colocate (gsm8k_lora_1gpu.yaml)", "0.5B", False, 16, 64, 4.0, 200, 512, True),
    Setting("1.5B QLoRA 4-bit, transformers (gsm8k_qlora_t4.yaml)", "1.5B", True, 8, 32, 2.0, 200, 384, False),
    Setting("1.5B LoRA, transformers generation", "1.5B", False, 16, 64, 2.0, 200, 512, False),
    Setting("1.5B LoRA, vLLM colocate", "1.5B", False, 16, 64, 4.0, 200, 512, True),
    Setting("7B QLoRA 4-bit, transformers, micro-batch 4", "7B", True, 4, 32, 2.0, 200, 512, False),
    Setting("7B LoRA, vLLM colocate, micro-batch 8", "7B", False, 8, 64, 4.0, 200, 512, True),
]

GPUS = {"T4 15 GB": 14.7, "L4/A10 24 GB": 22.5, "A100 40 GB": 39.5, "A100/H100 80 GB": 79.2}  # usable GiB
VLLM_FRACTION = 0.3


def vllm_share(weights_16bit_gib: float, capacity: float) -> float:
    """vLLM's reservation: 0.3 of the GPU, or more when its own 16-bit weights plus ~2 GiB of KV cache need it."""
    return max(VLLM_FRACTION * capacity, weights_16bit_gib + 2.0)


def verdict(setting: Setting, trainer_gib: float, gpu: str, capacity: float) -> str:
    if setting.vllm and gpu.startswith("T4"):
        return "n/a (no bf16: transformers)"
    extra = ""
    need = trainer_gib
    if setting.vllm:
        share = vllm_share(QWEN[setting.model].params * 2 / GIB, capacity)
        need += share
        if share > VLLM_FRACTION * capacity:
            extra = f", vllm_gpu_memory_utilization {share / capacity:.2f}"
    if need <= 0.8 * capacity:
        return f"fits (~{need:.0f}{extra})"
    if need <= capacity:
        return f"tight (~{need:.0f}{extra})"
    return f"no (~{need:.0f})"


def main() -> None:
    header = "| setting | weights | LoRA+Adam | activations | KV cache | trainer total | " + " | ".join(GPUS) + " |"
    print(header)
    print("|" + "---|" * (6 + len(GPUS)))
    for setting in SETTINGS:
        parts = estimate(setting)
        cells = [f"{parts[key]:.2f}" for key in ("weights", "adapter", "activations", "kv_cache", "total")]
        verdicts = [verdict(setting, parts["total"], gpu, capacity) for gpu, capacity in GPUS.items()]
        print(f"| {setting.label} | " + " | ".join(cells + verdicts) + " |")
    print()
    print(f"GiB. vLLM colocate adds {VLLM_FRACTION} x the GPU's memory (vllm_gpu_memory_utilization), or its 16-bit")
    print("weights + 2 GiB when more, to the trainer's total; 'fits' = under 80% of the GPU's usable memory,")
    print("'tight' = under 100%. Estimates, not measurements.")


if __name__ == "__main__":
    main()
