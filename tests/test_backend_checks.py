"""`trl_dapo_ext.backends`: a vLLM server asked for on a CPU is refused at once, with the reason (the trainer-side
path with a real vLLM install is in tests_backends/test_vllm_server.py)."""

from __future__ import annotations

import pytest

from trl_dapo_ext import DAPOConfig
from trl_dapo_ext.backends import UnsupportedBackendError, check_vllm_server_device


def _config(tmp_path, **kwargs):
    return DAPOConfig(str(tmp_path), use_cpu=True, bf16=False, report_to="none", **kwargs)


def test_vllm_server_on_a_cpu_is_refused_with_the_reason(tmp_path):
    with pytest.raises(UnsupportedBackendError, match="NCCL weight-transfer engine") as error:
        check_vllm_server_device(_config(tmp_path, use_vllm=True, vllm_mode="server"))
    assert "vllm_mode='colocate'" in str(error.value) and "'cpu'" in str(error.value)


@pytest.mark.parametrize("kwargs", [dict(use_vllm=True, vllm_mode="colocate"), dict(use_vllm=False)])
def test_other_backends_pass(tmp_path, kwargs):
    check_vllm_server_device(_config(tmp_path, **kwargs))
