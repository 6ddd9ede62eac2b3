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


def test_one_sampling_seed_for_every_vllm_colocate_request_is_refused(tmp_path):
    from trl_dapo_ext.backends import check_vllm_sampling_seed

    args = _config(tmp_path, use_vllm=True, vllm_mode="colocate", generation_kwargs={"seed": 0})
    with pytest.raises(UnsupportedBackendError, match="identical") as error:
        check_vllm_sampling_seed(args)
    assert "CPU Generator does not use offset" in str(error.value) and "remove" in str(error.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(use_vllm=True, vllm_mode="colocate"),  # TRL's own seeding: the engine's, no per-request seed
        dict(use_vllm=True, vllm_mode="colocate", generation_kwargs={"seed": None}),
        dict(use_vllm=False, generation_kwargs={"seed": 0}),  # transformers generation: not a vLLM request seed
    ],
)
def test_vllm_without_a_per_request_seed_passes(tmp_path, kwargs):
    from trl_dapo_ext.backends import check_vllm_sampling_seed

    check_vllm_sampling_seed(_config(tmp_path, **kwargs))
