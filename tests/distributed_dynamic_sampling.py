"""Run by tests/test_distributed.py under `torchrun --nproc_per_node 2` (gloo, CPU): dynamic sampling on 2 processes.

Each process writes what it saw to OUTPUT_DIR/rank{N}.json. Mode ``agree`` (default): the rounds and sizes of every
update batch. Mode ``resume``: a run with the default planner and history skipping, checkpointed at step 2, then
resumed from that checkpoint; the refill draws, counters and steering state of both after the checkpoint.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
import trl115_cpu_shim  # noqa: E402
from helpers import tiny_trainer  # noqa: E402
from test_dynamic_sampling import BatchRecorder, KindReward, ds_logs, kinds_dataset  # noqa: E402
from test_resume import RESUME, after_checkpoint, record_takes, steering_state, untimed  # noqa: E402

from trl_dapo_ext.metric_names import N  # noqa: E402
from trl_dapo_ext.tiny import build_char_tokenizer, build_tiny_causal_lm  # noqa: E402


def resume(output_dir: str) -> dict:
    tokenizer = build_char_tokenizer()
    dataset = kinds_dataset(["right", "varying", "right"], repeat=16)
    run_dir = os.path.join(output_dir, "run")

    def trainer():
        model = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=2)
        return tiny_trainer(model, KindReward(), dataset, tokenizer, run_dir, dynamic_sampling=True, **RESUME)

    full = trainer()
    full_takes = record_takes(full)
    full.train()
    full.accelerator.wait_for_everyone()
    checkpoint = os.path.join(run_dir, "checkpoint-2")
    resumed = trainer()
    resumed_takes = record_takes(resumed)
    resumed.train(resume_from_checkpoint=checkpoint)
    return {
        "rank": resumed.accelerator.process_index,
        "checkpoint_files": sorted(os.listdir(checkpoint)),
        "full_takes": [take for take in full_takes if take[0] >= 2],
        "resumed_takes": resumed_takes,
        "full_logs": after_checkpoint(full),
        "resumed_logs": after_checkpoint(resumed),
        "full_state": untimed(steering_state(full)),
        "resumed_state": untimed(steering_state(resumed)),
        "skipped": sum(h[N.DYNAMIC_SAMPLING_SKIPPED_PROMPTS] for h in ds_logs(full)),
    }


def agree(output_dir: str) -> dict:
    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=2)
    dataset = kinds_dataset(["right", "wrong", "varying"], repeat=16)
    trainer = tiny_trainer(
        model,
        KindReward(),
        dataset,
        tokenizer,
        output_dir,
        dynamic_sampling=True,
        max_steps=3,
        dynamic_sampling_oversample=1.5,
        scale_rewards="batch",
        gradient_accumulation_steps=2,
    )
    recorder = BatchRecorder(trainer)
    trainer.train()
    return {
        "rank": trainer.accelerator.process_index,
        "num_processes": trainer.accelerator.num_processes,
        "rows": [b["completion_ids"].shape[0] for b in recorder.batches],
        "num_items_in_batch": [b["num_items_in_batch"].item() for b in recorder.batches],
        "local_loss_tokens": [b["completion_mask"].sum().item() for b in recorder.batches],
        "prompt_kinds": [
            sorted(set(t[0] for t in tokenizer.batch_decode(b["prompt_ids"], skip_special_tokens=True)))
            for b in recorder.batches
        ],
        "logs": [h for h in trainer.state.log_history if N.DYNAMIC_SAMPLING_ROUNDS in h],
        "global_step": trainer.state.global_step,
    }


def main(output_dir: str, mode: str = "agree") -> None:
    trl115_cpu_shim.install_if_needed()
    torch.set_num_threads(1)
    report = {"agree": agree, "resume": resume}[mode](output_dir)
    with open(os.path.join(output_dir, f"rank{report['rank']}.json"), "w") as handle:
        json.dump(report, handle)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    # Tear the process group down explicitly, then leave without the interpreter's teardown: left to it, gloo's
    # threads can abort the process ("terminate called without an active exception") after all the work is done and
    # the report is written. Seen twice in CI under TRL 1.15 even with destroy_process_group, so exit directly.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:])
