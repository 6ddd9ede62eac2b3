"""Held-out evaluation of the demo's policy: greedy accuracy, sampled accuracy and pass@k, with paired draws."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .settings import DemoSettings

COMPLETION_TOKENS = DemoSettings.completion_tokens  # the demo's: its answers fit in 6 new tokens


@dataclass
class Evaluation:
    """Held-out accuracies of one policy: greedy, sampled (temperature 1), and pass@k over k samples."""

    greedy: float
    sampled: float
    pass_at_k: float
    k: int


def generate(
    model, tokenizer, prompts: list[str], do_sample: bool, repeats: int = 1, completion_tokens: int = COMPLETION_TOKENS
) -> list[str]:
    """Completions for ``prompts`` (each ``repeats`` times, next to each other), greedy or at temperature 1, of at most
    ``completion_tokens`` new tokens."""
    import torch

    texts = []
    for start in range(0, len(prompts), 256):
        chunk = [p for p in prompts[start : start + 256] for _ in range(repeats)]
        batch = tokenizer(chunk, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=completion_tokens,
                do_sample=do_sample,
                temperature=1.0 if do_sample else None,
                top_k=0 if do_sample else None,
                top_p=1.0 if do_sample else None,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        texts += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return texts


def greedy_accuracy(model, tokenizer, problems, verifier, completion_tokens: int = COMPLETION_TOKENS) -> float:
    """Fraction of ``problems`` whose greedy completion (at most ``completion_tokens`` new tokens) the verifier
    accepts."""
    model.eval()
    prompts = [p["prompt"] for p in problems]
    rewards = verifier(
        generate(model, tokenizer, prompts, False, completion_tokens=completion_tokens),
        answer=[p["answer"] for p in problems],
    )
    model.train()
    return sum(1.0 for r in rewards if r == 1.0) / len(problems)


def evaluate(
    model, tokenizer, problems, samples: int, seed: int, verifier, completion_tokens: int = COMPLETION_TOKENS
) -> Evaluation:
    """Held-out accuracy: greedy, one sample at temperature 1, and the unbiased pass@k over ``samples`` samples, each
    completion of at most ``completion_tokens`` new tokens.

    The sampling generator is seeded with ``seed`` at every call, so evaluations before and after RL draw the same
    random numbers for the same prompts in the same order: a paired comparison, whose difference reflects the policy
    rather than the luck of the draw.
    """
    import torch

    from trl_dapo_ext.core.metrics import pass_at_k

    prompts = [p["prompt"] for p in problems]
    answers = [p["answer"] for p in problems]
    greedy = greedy_accuracy(model, tokenizer, problems, verifier, completion_tokens)
    model.eval()
    torch.manual_seed(seed)
    sampled = verifier(
        generate(model, tokenizer, prompts, True, samples, completion_tokens),
        answer=[a for a in answers for _ in range(samples)],
    )
    model.train()
    correct = torch.tensor(
        [sum(1.0 for r in sampled[i * samples : (i + 1) * samples] if r == 1.0) for i in range(len(prompts))]
    )
    return Evaluation(
        greedy=greedy,
        sampled=float(correct.sum()) / (len(prompts) * samples),
        pass_at_k=float(pass_at_k(torch.full_like(correct, samples), correct, samples).mean()),
        k=samples,
    )


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Restores torch's CPU random state on exit: an evaluation inside a training run leaves its random stream as it was.

    `evaluate` reseeds the generator for its paired draws; without this, a run evaluated along the way would train on
    other random numbers than the same run evaluated only at the end.
    """
    import torch

    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)
