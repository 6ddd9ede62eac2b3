"""Dynamic sampling on 2 CPU processes: run by tests/test_distributed.py under `torchrun --nproc_per_node 2` (DDP,
gloo) and by tests_distributed/ under `accelerate launch` with the project's DeepSpeed configs.

    distributed_dynamic_sampling.py OUTPUT_DIR MODES [CONFIG_JSON]

MODES: comma-separated, run one after another in the same processes. ``agree``: the rounds, sizes, prompts and
losses of every update batch, the engine in use and a digest of the parameters after training. ``lora``: the same
with a LoRA adapter. ``resume``: a run with the default planner and history skipping, checkpointed at step 2, then
resumed from that checkpoint; the refill draws, counters and steering state of both after the checkpoint.
``diverge``: rank 1's planner decisions made to differ from rank 0's; the rounds both ranks ran. ``budget``: a run
bounded by ``max_generated_completions``; the count at every step end and the logged counts and lrs. ``rounds``:
each step's rounds and the logs. ``pipeline``: each step's generation calls, the logs and the completions table.
CONFIG_JSON: config keywords for every trainer (e.g. ``{"use_cpu": false, "ddp_backend": "gloo"}`` for DeepSpeed).
Each process writes ``{mode: report}`` to OUTPUT_DIR/rank{N}.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from contextlib import nullcontext

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


def resume(output_dir: str, **config) -> dict:
    tokenizer = build_char_tokenizer()
    dataset = kinds_dataset(["right", "varying", "right"], repeat=16)
    run_dir = os.path.join(output_dir, "run")

    def trainer():
        model = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=2)
        return tiny_trainer(
            model, KindReward(), dataset, tokenizer, run_dir, dynamic_sampling=True, **RESUME, **config
        )

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


class RoundRecorder(KindReward):
    """KindReward that also keeps the prompts of every call: one call per generation round on each rank."""

    def __init__(self):
        super().__init__()
        self.rounds: list[list[str]] = []

    def __call__(self, completions, kind, prompts, **kwargs):
        self.rounds.append(sorted(set(prompts)))
        return super().__call__(completions, kind, **kwargs)


def parameter_digest(trainer) -> str:
    """sha256 of every parameter of the trained model, in name order (gathered first when ZeRO-3 shards them)."""
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    params = [p for _, p in sorted(model.named_parameters(), key=lambda item: item[0])]
    gather = nullcontext()
    if any(hasattr(p, "ds_id") for p in params):  # a ZeRO-3 partitioned parameter
        import deepspeed

        gather = deepspeed.zero.GatheredParameters(params)
    with gather:
        return hashlib.sha256(b"".join(p.detach().float().cpu().numpy().tobytes() for p in params)).hexdigest()


def record_losses(trainer) -> list[float]:
    """Each micro-batch's loss as this rank computes it (the logged loss is averaged over the ranks)."""
    losses: list[float] = []
    inner = trainer.compute_loss

    def recorded(*args, **kwargs):
        loss = inner(*args, **kwargs)
        losses.append(loss.item())
        return loss

    trainer.compute_loss = recorded
    return losses


def engine(trainer) -> dict:
    """What actually trains: the wrapper class, accelerate's distributed type, the DeepSpeed ZeRO stage configured,
    the optimizer DeepSpeed built for it and how many parameters this process holds only a shard of."""
    plugin = trainer.accelerator.state.deepspeed_plugin
    wrapped = trainer.model_wrapped
    optimizer = getattr(wrapped, "optimizer", None)  # a DeepSpeedEngine's own ZeRO optimizer
    sharded = [p for p in wrapped.parameters() if hasattr(p, "ds_tensor") and p.ds_tensor.numel() < p.ds_numel]
    return {
        "wrapper": type(wrapped).__name__,
        "distributed_type": str(trainer.accelerator.distributed_type).rsplit(".", 1)[-1],
        "zero_stage": plugin.zero_stage if plugin is not None else None,
        "zero_optimizer": type(optimizer).__name__ if optimizer is not None else None,
        "sharded_parameters": len(sharded),
        "world_size": torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1,
    }


def lora(output_dir: str, **config) -> dict:
    from peft import LoraConfig

    adapter = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return agree(output_dir, peft_config=adapter, learning_rate=5e-2, **config)


def agree(output_dir: str, **config) -> dict:
    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=2)
    dataset = kinds_dataset(["right", "wrong", "varying"], repeat=24)
    reward = RoundRecorder()
    trainer = tiny_trainer(
        model,
        reward,
        dataset,
        tokenizer,
        output_dir,
        dynamic_sampling=True,
        max_steps=3,
        scale_rewards="batch",
        gradient_accumulation_steps=2,
        **{"dynamic_sampling_oversample": 1.5, **config},  # config may set it (None: screening sizes its rounds)
    )
    recorder = BatchRecorder(trainer)
    losses = record_losses(trainer)
    initial_digest = parameter_digest(trainer)
    trainer.train()
    return {
        "engine": engine(trainer),
        "losses": losses,
        "initial_digest": initial_digest,
        "parameter_digest": parameter_digest(trainer),
        "round_prompts": reward.rounds,
        "prompts": [tokenizer.batch_decode(b["prompt_ids"], skip_special_tokens=True) for b in recorder.batches],
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


def diverge(output_dir: str, **config) -> dict:
    """The adaptive planner, with rank 1's decisions made to differ from rank 0's (as a near-tie could on CPUs that
    round differently): every process must follow rank 0's, or the ranks run mismatched collectives."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=2)
    reward = RoundRecorder()
    trainer = tiny_trainer(
        model,
        reward,
        kinds_dataset(["right", "wrong", "varying"], repeat=16),
        tokenizer,
        output_dir,
        dynamic_sampling=True,
        max_steps=3,
        **config,
    )
    sampler = trainer.dynamic_sampling
    rank = trainer.accelerator.process_index
    decided: list[tuple[int, str | None]] = []  # this rank's own decisions, before they are agreed
    first_refill, plan_round = sampler.first_refill, sampler.plan_round

    def own_first_refill(*args, **kwargs):
        groups = first_refill(*args, **kwargs) + 3 * rank
        decided.append((groups, None))
        return groups

    def own_plan_round(progress):
        plan = plan_round(progress)
        if rank == 1 and plan.stop == "full" and progress.round_index == 1:
            plan = type(plan)(groups=2)  # rank 1 would ask for another round
        decided.append((plan.groups, plan.stop))
        return plan

    sampler.first_refill, sampler.plan_round = own_first_refill, own_plan_round
    trainer.train()
    return {
        "rank": rank,
        "decided": decided,
        "round_sizes": [len(prompts) for prompts in reward.rounds],
        "logs": [h for h in trainer.state.log_history if N.DYNAMIC_SAMPLING_ROUNDS in h],
        "global_step": trainer.state.global_step,
    }


def budget(output_dir: str, **config) -> dict:
    from transformers import TrainerCallback

    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=2)
    trainer = tiny_trainer(
        model,
        KindReward(),
        kinds_dataset(["right", "varying", "right"], repeat=16),
        tokenizer,
        output_dir,
        dynamic_sampling=True,
        max_steps=-1,
        max_generated_completions=100,
        lr_scheduler_type="linear",
        **config,
    )
    counts: list[int] = []

    class Counts(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            counts.append(trainer.generated_completions)

    trainer.add_callback(Counts())
    trainer.train()
    return {
        "rank": trainer.accelerator.process_index,
        "max_steps": trainer.args.max_steps,
        "counts": counts,
        "logged": [h[N.DYNAMIC_SAMPLING_GENERATED_COMPLETIONS] for h in ds_logs(trainer)],
        "lrs": [h["learning_rate"] for h in trainer.state.log_history if "loss" in h],
        "global_step": trainer.state.global_step,
        "parameter_digest": parameter_digest(trainer),
    }


def rounds(output_dir: str, **config) -> dict:
    """Each step's rounds (their prompts, on this rank) and the logs."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=2)
    reward = RoundRecorder()
    trainer = tiny_trainer(
        model,
        reward,
        kinds_dataset(["varying", "right", "right", "wrong"], repeat=12),
        tokenizer,
        output_dir,
        dynamic_sampling=True,
        **config,
    )
    per_step: list[list[list[str]]] = []
    scored_round = trainer._scored_round

    def recorded(rows, need_rewards=True):
        if trainer.state.global_step == len(per_step):
            per_step.append([])
        per_step[-1].append(sorted({row["prompt"] for row in rows}))
        return scored_round(rows, need_rewards)

    trainer._scored_round = recorded
    trainer.train()
    return {"rank": trainer.accelerator.process_index, "rounds_per_step": per_step, "logs": ds_logs(trainer)}


def pipeline(output_dir: str, **config) -> dict:
    """Pipelined screening (config sets it): each step's generation calls (rows and prompts on this rank), the logs,
    the completions table of the last step (every rank's rows) and the prompts of this rank's last update batch."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(tokenizer, hidden_size=32, num_layers=1, seed=2)
    trainer = tiny_trainer(
        model,
        KindReward(),
        kinds_dataset(["varying", "right", "varying", "wrong"], repeat=12),
        tokenizer,
        output_dir,
        dynamic_sampling=True,
        log_completions=True,
        **config,
    )
    recorder = BatchRecorder(trainer)
    calls: list[dict] = []
    scored_round = trainer._scored_round

    def recorded(rows, need_rewards=True):
        calls.append({"step": trainer.state.global_step, "rows": len(rows), "prompts": [r["prompt"] for r in rows]})
        return scored_round(rows, need_rewards)

    trainer._scored_round = recorded
    initial_digest = parameter_digest(trainer)
    trainer.train()
    return {
        "rank": trainer.accelerator.process_index,
        "engine": engine(trainer),
        "calls": calls,
        "logs": ds_logs(trainer),
        "table_prompts": list(trainer._logs["prompt"]),
        "batch_prompts": tokenizer.batch_decode(recorder.batches[-1]["prompt_ids"], skip_special_tokens=True),
        "initial_digest": initial_digest,
        "parameter_digest": parameter_digest(trainer),
        "global_step": trainer.state.global_step,
    }


def main(output_dir: str, modes: str = "agree", config: str = "{}") -> None:
    trl115_cpu_shim.install_if_needed()
    torch.set_num_threads(1)
    runs = {
        "agree": agree,
        "lora": lora,
        "resume": resume,
        "diverge": diverge,
        "budget": budget,
        "rounds": rounds,
        "pipeline": pipeline,
    }
    report = {mode: runs[mode](os.path.join(output_dir, mode), **json.loads(config)) for mode in modes.split(",")}
    rank = next(iter(report.values()))["rank"]
    with open(os.path.join(output_dir, f"rank{rank}.json"), "w") as handle:
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
