"""Dynamic sampling on 2 CPU processes (torchrun, gloo): both ranks agree on rounds and sizes, and training ends."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from itertools import accumulate

import pytest
from test_dynamic_sampling import G, realised_cost
from test_pipeline import assert_pipelined_funnel

from trl_dapo_ext.metric_names import N

pytestmark = pytest.mark.trainer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_two_processes(
    tmp_path, modes: str, accelerate_config: str | None = None, config: dict | None = None
) -> subprocess.CompletedProcess:
    """Run tests/distributed_dynamic_sampling.py in ``modes`` on 2 CPU processes; the finished launcher.

    Launched by ``torchrun`` (DDP on gloo), or by ``accelerate launch --config_file accelerate_config`` the way
    users launch DeepSpeed (``--mixed_precision no``: the CPU computes in float32, like the DDP run it is compared to).
    ``config``: keywords for every trainer's config.
    """
    script = os.path.join(os.path.dirname(__file__), "distributed_dynamic_sampling.py")
    if accelerate_config is None:
        launcher = ["torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
        launcher += ["--master_port", str(free_port())]
    else:
        launcher = ["accelerate.commands.launch", "--config_file", accelerate_config, "--num_processes", "2"]
        launcher += ["--mixed_precision", "no", "--main_process_ip", "127.0.0.1"]
        launcher += ["--main_process_port", str(free_port())]
    command = [sys.executable, "-m", *launcher, script, str(tmp_path), modes, json.dumps(config or {})]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), os.getcwd()])),
    }
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def run_on_two_processes(tmp_path, modes: str, accelerate_config: str | None = None, config: dict | None = None):
    """`launch_two_processes`, which must succeed; each rank's ``{mode: report}``."""
    result = launch_two_processes(tmp_path, modes, accelerate_config, config)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_two_processes_agree(tmp_path):
    assert_ranks_agree([report["agree"] for report in run_on_two_processes(tmp_path, "agree")])


def assert_ranks_agree(reports: list[dict]) -> None:
    """Both ranks ran 3 steps of the same rounds on different prompts, kept whole informative groups, and share
    the global counters, the token denominator and the trained parameters."""
    assert [r["num_processes"] for r in reports] == [2, 2]
    assert [r["rank"] for r in reports] == [0, 1]
    assert [r["global_step"] for r in reports] == [3, 3]
    # The same number of rounds (one reward call each), and in every round each rank generated for its own prompts.
    assert len(reports[0]["round_prompts"]) == len(reports[1]["round_prompts"]) >= 3
    for prompts_0, prompts_1 in zip(reports[0]["round_prompts"], reports[1]["round_prompts"], strict=True):
        assert prompts_0 and prompts_1 and not set(prompts_0) & set(prompts_1)
    for report in reports:
        # per_device_train_batch_size * steps_per_generation rows on every rank, only informative prompts
        assert report["rows"] == [16, 16, 16]
        assert all(kinds == ["v"] for kinds in report["prompt_kinds"])
        for prompts in report["prompts"]:  # whole groups: G rows of the same prompt
            assert all(len(set(prompts[i : i + G])) == 1 for i in range(0, len(prompts), G))
    # Same global counters and the same global token denominator on both ranks ...
    # (only the gathered metrics: loss and step_time are each rank's own)
    shared = ("dynamic_sampling/", "reward", "rewards/", "completions/", "frac_reward_zero_std")
    for log_0, log_1 in zip(reports[0]["logs"], reports[1]["logs"], strict=True):
        assert {k: v for k, v in log_0.items() if k.startswith(shared)} == {
            k: v for k, v in log_1.items() if k.startswith(shared)
        }
    assert reports[0]["num_items_in_batch"] == reports[1]["num_items_in_batch"]
    # ... which is the sum of both ranks' loss tokens.
    totals = [a + b for a, b in zip(reports[0]["local_loss_tokens"], reports[1]["local_loss_tokens"])]
    assert reports[0]["num_items_in_batch"] == totals
    for log in reports[0]["logs"]:
        assert log[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] == 8  # 4 groups per rank, 2 ranks
    # The steps changed the parameters, identically on both ranks.
    assert reports[0]["parameter_digest"] == reports[1]["parameter_digest"] != reports[0]["initial_digest"]


SCREENING = {"dynamic_sampling_screen_generations": 2, "dynamic_sampling_oversample": None}


def test_two_processes_agree_with_screening(tmp_path):
    """Screening: each rank completes its own mixed prompts, screens the rest of an equal round, and both take the
    main process's round sizes."""
    reports = [report["agree"] for report in run_on_two_processes(tmp_path, "agree", config=SCREENING)]
    assert_screening_run(reports)


def assert_screening_run(reports: list[dict]) -> None:
    assert_ranks_agree(reports)
    for log in reports[0]["logs"]:
        assert log[N.DYNAMIC_SAMPLING_SCREENED_PROMPTS] > log[N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS] >= 8
        assert_funnel(log)


def assert_funnel(log: dict) -> None:
    """Every screened prompt is completed or dropped; the stranded ones are among the dropped."""
    screened, completed = log[N.DYNAMIC_SAMPLING_SCREENED_PROMPTS], log[N.DYNAMIC_SAMPLING_COMPLETED_PROMPTS]
    dropped, stranded = log[N.DYNAMIC_SAMPLING_DROPPED_PROMPTS], log[N.DYNAMIC_SAMPLING_STRANDED_PROBES]
    assert screened == completed + dropped and 0 <= stranded <= dropped


def test_two_processes_count_the_probes_no_round_can_complete(tmp_path):
    """A fixed budget on 2 processes, at most 3 rounds: in a step's last round the rank with fewer completions to
    make still generates as many rows (TRL's collectives), as probes no round can complete. They are counted:
    ``stranded_probes`` is every rank's prompts that first appear in its step's last round."""
    config = {
        **SCREENING,
        "dynamic_sampling_fixed_budget": True,
        "dynamic_sampling_round_latency": 0.0,
        "dynamic_sampling_max_rounds": 3,
        "max_steps": 4,
    }
    reports = [report["rounds"] for report in run_on_two_processes(tmp_path, "rounds", config=config)]
    stranded = [0] * len(reports[0]["logs"])
    for report in reports:
        for step, rounds in enumerate(report["rounds_per_step"]):
            earlier = {prompt for prompts in rounds[:-1] for prompt in prompts}
            stranded[step] += len(set(rounds[-1]) - earlier)
    assert [log[N.DYNAMIC_SAMPLING_STRANDED_PROBES] for log in reports[0]["logs"]] == stranded
    assert sum(stranded) > 0
    for log in reports[0]["logs"]:
        assert_funnel(log)


def test_every_process_follows_the_main_processs_round_plan(tmp_path):
    reports = [report["diverge"] for report in run_on_two_processes(tmp_path, "diverge")]
    assert [r["global_step"] for r in reports] == [3, 3]
    assert reports[0]["decided"] != reports[1]["decided"]  # the ranks planned differently ...
    assert reports[0]["round_sizes"] == reports[1]["round_sizes"]  # ... and ran rank 0's rounds
    assert [h[N.DYNAMIC_SAMPLING_ROUNDS] for h in reports[0]["logs"]] == [
        h[N.DYNAMIC_SAMPLING_ROUNDS] for h in reports[1]["logs"]
    ]
    for log in reports[0]["logs"]:  # the planner's cost is per process, the completions count every process's
        assert log[N.DYNAMIC_SAMPLING_REALISED_COST] == pytest.approx(realised_cost(log, num_processes=2))


def test_two_processes_resume_exactly(tmp_path):
    """Default planner, history skipping: each rank saves its own refill state beside its RNG state and resumes."""
    assert_exact_resume([report["resume"] for report in run_on_two_processes(tmp_path, "resume")])


def assert_exact_resume(reports: list[dict], skipping: bool = True) -> None:
    """Both ranks saved their refill state and resumed it: the same draws, counters and steering state as the run
    that did not stop, and the same state on both ranks. ``skipping``: history skipping passed over prompts."""
    files = reports[0]["checkpoint_files"]
    assert {"rng_state_0.pth", "rng_state_1.pth", "dapo_refill_state_0.json", "dapo_refill_state_1.json"} <= set(files)
    for report in reports:
        assert report["skipped"] > 0 or not skipping
        assert report["resumed_takes"] == report["full_takes"] != []
        assert report["resumed_logs"] == report["full_logs"] != []
        assert report["resumed_state"] == report["full_state"]
    assert reports[0]["resumed_state"] == reports[1]["resumed_state"]  # the ranks agree


def test_two_processes_share_the_generation_budget(tmp_path):
    """max_generated_completions: both ranks count every process's completions (the logged count), stop at the same
    step, the first at or past the budget, and schedule the same lr."""
    reports = [report["budget"] for report in run_on_two_processes(tmp_path, "budget")]
    assert reports[0]["max_steps"] == 7  # ceil(100 / 16): 8 rows per process, 2 processes
    for key in ("counts", "logged", "lrs", "global_step", "parameter_digest"):
        assert reports[0][key] == reports[1][key], key
    counts = reports[0]["counts"]
    assert counts == list(accumulate(reports[0]["logged"]))
    assert counts[-1] >= 100 > counts[-2] and len(counts) == reports[0]["global_step"]


PIPELINE = {
    **SCREENING,
    "dynamic_sampling_fixed_budget": True,
    "dynamic_sampling_pipeline": True,
    "max_steps": 6,
}


@pytest.mark.parametrize("fixed_budget", [True, False], ids=["fixed-budget", "refill"])
def test_two_processes_pipeline_screening(tmp_path, fixed_budget):
    """Pipelined screening on 2 processes: one generation call per step after the first, as many rows on both ranks
    in every call (TRL's collectives), each rank its own prompts, the carried probes completed by the next step."""
    config = {**PIPELINE, "dynamic_sampling_fixed_budget": fixed_budget}
    reports = [report["pipeline"] for report in run_on_two_processes(tmp_path, "pipeline", config=config)]
    assert_pipelined_run(reports, fixed_budget)


def assert_pipelined_run(reports: list[dict], fixed_budget: bool = True) -> None:
    steps = [report["global_step"] for report in reports]
    assert steps == [6, 6]
    calls = [calls_per_step(report["calls"]) for report in reports]
    assert sorted(calls[0]) == sorted(calls[1]) == list(range(6))
    for step in range(6):
        assert [call["rows"] for call in calls[0][step]] == [call["rows"] for call in calls[1][step]]
        for rank_calls in (calls[0][step], calls[1][step]):
            rows = sum(call["rows"] for call in rank_calls)
            assert rows <= 8 or not fixed_budget  # the fixed budget: a plain step's rows per rank
        prompts = [{p for call in rank_calls[step] for p in call["prompts"]} for rank_calls in calls]
        # Each rank probes and completes its own prompts. (With refill the stream may come round, on this small
        # dataset, to a prompt another rank carried from the previous step.)
        assert not prompts[0] & prompts[1] or not fixed_budget
    one_call = [len(calls[0][step]) == 1 for step in range(1, 5)]
    assert all(one_call) if fixed_budget else sum(one_call) >= 3
    if not fixed_budget:  # refill: every batch full of informative groups, 2 per rank
        assert all(log[N.DYNAMIC_SAMPLING_RETAINED_GROUPS] == 4 for log in reports[0]["logs"])
    logs = reports[0]["logs"]
    shared = ("dynamic_sampling/", "reward", "rewards/", "completions/", "frac_reward_zero_std")
    for log_0, log_1 in zip(logs, reports[1]["logs"], strict=True):
        assert {k: v for k, v in log_0.items() if k.startswith(shared)} == {
            k: v for k, v in log_1.items() if k.startswith(shared)
        }
    assert_pipelined_funnel(logs)
    assert all(log[N.DYNAMIC_SAMPLING_CARRIED_PROBES] > 0 for log in logs[:-1])
    assert all(log[N.DYNAMIC_SAMPLING_STALE_ROW_SHARE] > 0 for log in logs[1:])
    # The completions table of the last step: every rank's trained rows, rank 0's first, carried rows among them.
    assert reports[0]["table_prompts"] == reports[0]["batch_prompts"] + reports[1]["batch_prompts"]
    assert reports[0]["parameter_digest"] == reports[1]["parameter_digest"] != reports[0]["initial_digest"]


def calls_per_step(calls: list[dict]) -> dict[int, list[dict]]:
    steps: dict[int, list[dict]] = {}
    for call in calls:
        steps.setdefault(call["step"], []).append(call)
    return steps


def test_two_processes_resume_pipelined_screening_exactly(tmp_path):
    """Each rank checkpoints the probes it carries (its own file) and the resumed run completes the same ones."""
    config = {key: value for key, value in PIPELINE.items() if key != "max_steps"}
    reports = [report["resume"] for report in run_on_two_processes(tmp_path, "resume", config=config)]
    assert {"dapo_carried_probes_0.pt", "dapo_carried_probes_1.pt"} <= set(reports[0]["checkpoint_files"])
    assert_exact_resume(reports, skipping=False)  # screening probes the batch's own prompts: none to skip here
