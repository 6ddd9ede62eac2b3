"""Writes smollm2_completions.jsonl: 200 completions SmolLM2-135M-Instruct wrote (4 samples each for the first 50
problems of the smollm2_cpu recipe's data/word_problems.jsonl, the recipe's system prompt and chat template,
temperature 0.7, at most 128 new tokens, seed 0), with their golds. Run once (about 10 minutes on 2 cores); the file is committed, so
the tests that read it need no model:

    OMP_NUM_THREADS=1 python tests/data/make_smollm2_completions.py

Each row: id, question, answer (the gold), completion (text, <|im_end|> removed), truncated (no <|im_end|> within
the limit). tests/data/label_smollm2_completions.py adds the hand-checked labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_dapo_ext.models import SMOLLM2, smollm2_path

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS, SAMPLES, MAX_NEW_TOKENS, TEMPERATURE, BATCH_PROBLEMS = 50, 4, 128, 0.7, 5


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    recipes = ROOT / "trl_dapo_ext" / "recipes"
    recipe = yaml.safe_load((recipes / "smollm2_cpu.yaml").read_text())
    rows = [json.loads(line) for line in (recipes / recipe["dataset_name"]).read_text().splitlines()][:PROBLEMS]
    folder = smollm2_path()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    # Generation continues the prompt: padding goes in front (the saved tokenizer pads on the right, and
    # apply_chat_template's own padding_side argument is not honoured by every transformers release).
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    out = []
    for start in range(0, len(rows), BATCH_PROBLEMS):
        batch = rows[start : start + BATCH_PROBLEMS]
        messages = [
            [{"role": "system", "content": recipe["system_prompt"]}, {"role": "user", "content": row["question"]}]
            for row in batch
        ]
        encoded = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, padding=True, return_tensors="pt"
        )
        assert (encoded["attention_mask"][:, -1] == 1).all(), "not left-padded"
        with torch.no_grad():
            generated = model.generate(
                **encoded,
                do_sample=True,
                temperature=TEMPERATURE,
                max_new_tokens=MAX_NEW_TOKENS,
                num_return_sequences=SAMPLES,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos,
            )
        completions = generated[:, encoded["input_ids"].shape[1] :]
        for index, ids in enumerate(completions.tolist()):
            row = batch[index // SAMPLES]
            ended = eos in ids
            ids = ids[: ids.index(eos)] if ended else ids
            out.append(
                {
                    "id": f"p{start + index // SAMPLES:02d}-s{index % SAMPLES}",
                    "question": row["question"],
                    "answer": row["answer"],
                    "completion": tokenizer.decode(ids, skip_special_tokens=True),
                    "truncated": not ended,
                }
            )
        print(f"{len(out)}/{PROBLEMS * SAMPLES}", flush=True)
    path = Path(__file__).with_name("smollm2_completions.jsonl")
    path.write_text("".join(json.dumps(row) + "\n" for row in out))
    print(f"wrote {path} ({SMOLLM2.requirement})")


if __name__ == "__main__":
    main()
