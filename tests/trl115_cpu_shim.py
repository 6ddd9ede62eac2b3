"""Test-only workaround: TRL 1.15.0's GRPOTrainer cannot score log-probabilities on a CPU.

TRL 1.15 computes per-token log-probabilities with a Triton kernel (`trl.kernels.ChunkedLogProbFunction`) and has no
CPU fallback: without Triton it calls `None.apply`, and with Triton the kernel rejects CPU tensors. TRL 1.16 added a
PyTorch fallback. CI has no GPU, so to run our trainer tests against TRL 1.15's seams we swap in the plain PyTorch
computation of the same quantities (full logits, no chunking). Both the plain-TRL reference and DAPOTrainer run under
the same shim, so drop-in comparisons stay like for like. Nothing in the package uses this module.
"""

from __future__ import annotations

import torch


class TorchLogProbFunction:
    """Same inputs and outputs as TRL 1.15's `ChunkedLogProbFunction.apply`, computed with autograd-tracked torch ops."""

    @staticmethod
    def apply(
        hidden,
        weight,
        bias,
        targets,
        temperature,
        chunk_size,
        final_logit_softcapping=None,
        logit_scale=1.0,
        outputs=("entropy", "log_sum_sq_probs", "mean_logits", "is_top1"),
    ):
        logits = torch.nn.functional.linear(hidden.float(), weight.float(), None if bias is None else bias.float())
        logits = logits * logit_scale
        if final_logit_softcapping is not None:
            logits = final_logit_softcapping * torch.tanh(logits / final_logit_softcapping)
        logits = logits / temperature
        log_softmax = torch.log_softmax(logits, dim=-1)
        log_probs = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_softmax.exp() * log_softmax).sum(-1) if "entropy" in outputs else None
        log_sum_sq = torch.logsumexp(2 * log_softmax, dim=-1).detach() if "log_sum_sq_probs" in outputs else None
        mean_logits = logits.mean(-1).detach() if "mean_logits" in outputs else None
        is_top1 = (logits.argmax(-1) == targets) if "is_top1" in outputs else None
        return log_probs, entropy, log_sum_sq, mean_logits, is_top1


def install_if_needed() -> bool:
    """Patch TRL 1.15 when it would fail on this machine; return whether the shim was installed."""
    import trl.trainer.utils as trl_utils

    if getattr(trl_utils, "_ChunkedLogProbFunction", "absent") is not None and hasattr(trl_utils, "_use_triton"):
        return False  # TRL >= 1.16 has its own CPU path
    if torch.cuda.is_available():
        return False
    trl_utils._ChunkedLogProbFunction = TorchLogProbFunction
    return True
