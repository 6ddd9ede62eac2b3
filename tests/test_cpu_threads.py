"""OpenMP workers that sleep while they wait, set before torch loads, in every entry point; and --threads auto.

The entry-point tests run each command line in a child process with a spy on Python's import system: at the first
`import torch` it records the wait variables of the environment, lets torch load (its OpenMP runtime prints the
settings it read, under OMP_DISPLAY_ENV=VERBOSE) and ends the process. What the environment holds at that moment
is what the runtime reads: it reads it once, at load. Nothing here depends on the machine's speed or load.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trl_dapo_ext import cpu_threads
from trl_dapo_ext.cpu_threads import (
    WAIT_VARIABLES,
    ThreadChoice,
    busy_cores,
    choose_threads,
    configure_openmp,
    cpu_quota,
    parse_cpu_quota,
    parse_threads,
    resolve_threads,
)

ROOT = Path(__file__).resolve().parents[1]
AT_TORCH = "AT_TORCH_IMPORT "
REACHED_TORCH = 17  # the spy's exit status: the command got as far as importing torch
# torch's PyPI wheels load GNU libgomp (this process imported torch in conftest), which reports the spin count it
# read under OMP_DISPLAY_ENV=VERBOSE; another OpenMP runtime prints none, and only the environment is checked.
try:
    LIBGOMP = "/libgomp" in Path("/proc/self/maps").read_text()
except OSError:
    LIBGOMP = False

SPY = f"""
import importlib.abc, json, os, sys


class TorchSpy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        values = {{key: os.environ.get(key) for key in {WAIT_VARIABLES!r}}}
        print({AT_TORCH!r} + json.dumps(values), file=sys.stderr, flush=True)
        import torch  # the OpenMP runtime loads here and, under OMP_DISPLAY_ENV=VERBOSE, prints what it read

        torch.ones(1 << 16).sum()
        sys.stderr.flush()
        os._exit({REACHED_TORCH})


sys.meta_path.insert(0, TorchSpy())
"""


def _run_until_torch(code: str, cwd: Path, **env_overrides: str) -> tuple[dict, str]:
    """Run ``code`` after the spy; returns the wait variables at ``import torch`` and the child's stderr."""
    env = {key: value for key, value in os.environ.items() if key not in WAIT_VARIABLES}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        OMP_DISPLAY_ENV="VERBOSE",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TRL_DAPO_TINY="1",  # the notebooks' switch: no install, no download
        **env_overrides,
    )
    result = subprocess.run(
        [sys.executable, "-c", SPY + code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == REACHED_TORCH, f"never imported torch (exit {result.returncode}):\n{result.stderr}"
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(AT_TORCH)]
    return json.loads(line.removeprefix(AT_TORCH)), result.stderr


def _spin_count(stderr: str) -> str | None:
    """The spin count libgomp read at load (None under another OpenMP runtime, which prints no such line)."""
    match = re.search(r"GOMP_SPINCOUNT = '(\d+)'", stderr)
    return match[1] if match else None


def _expected(spin_count: str) -> str | None:
    return spin_count if LIBGOMP else None


def _module(module: str, *argv: str) -> str:
    """``python -m module argv...``, as Python runs it."""
    return f"import runpy, sys\nsys.argv = [{module!r}, *{list(argv)!r}]\nrunpy.run_module({module!r}, run_name='__main__')\n"


def _notebook_until_torch(name: str) -> str:
    """A notebook's code cells up to the first that imports torch, as one script (a fresh kernel runs them so)."""
    cells = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    code = []
    for cell in cells:
        if cell["cell_type"] == "code":
            code.append("".join(cell["source"]))
            if re.search(r"^import torch$", code[-1], re.MULTILINE):
                return "\n".join(code)
    raise AssertionError(f"{name} never imports torch")


# Each entry point with a command that reaches `import torch` (the spy stops it there).
ENTRY_POINTS = {
    "trl-dapo demo": _module("trl_dapo_ext.cli.main", "demo", "--output-dir", "out"),
    "trl-dapo demo --quick": _module("trl_dapo_ext.cli.main", "demo", "--quick", "--output-dir", "out"),
    "trl-dapo train": _module("trl_dapo_ext.cli.main", "train", "--config", "tiny_cpu"),
    "trl-dapo profile": _module("trl_dapo_ext.cli.main", "profile", "--model", "m", "--dataset", "d.jsonl"),
    # the console script (pyproject.toml: trl_dapo_ext.cli.main:main), as pip writes it
    "trl-dapo script": "import sys\nfrom trl_dapo_ext.cli.main import main\nsys.argv = ['trl-dapo', 'demo']\nsys.exit(main())\n",
    "python -m trl_dapo_ext.cli.train": _module("trl_dapo_ext.cli.train", "--config", "recipe.yaml"),
    "python -m trl_dapo_ext.cli.demo": _module("trl_dapo_ext.cli.demo", "--quick"),
    "notebook dapo_gsm8k_lora (CPU mode)": _notebook_until_torch("dapo_gsm8k_lora"),
    "notebook code_rl_lora (CPU mode)": _notebook_until_torch("code_rl_lora"),
}


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_every_entry_point_sets_the_passive_wait_policy_before_torch_loads(entry_point, tmp_path):
    waits, stderr = _run_until_torch(ENTRY_POINTS[entry_point], tmp_path)
    assert waits == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None, "KMP_BLOCKTIME": None, "KMP_LIBRARY": None}
    assert _spin_count(stderr) == _expected("0")  # libgomp read it: its workers never spin


def test_make_demo_runs_the_checked_command_line():
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "-m trl_dapo_ext.cli.main demo" in recipe  # the `trl-dapo demo` entry point tested above


@pytest.mark.parametrize(
    ("user", "spin_count"),
    [({"OMP_WAIT_POLICY": "ACTIVE"}, "30000000000"), ({"GOMP_SPINCOUNT": "1234"}, "1234")],
)
def test_a_wait_setting_of_the_users_own_is_kept(user, spin_count, tmp_path):
    waits, stderr = _run_until_torch(ENTRY_POINTS["trl-dapo demo --quick"], tmp_path, **user)
    assert waits == {name: user.get(name) for name in WAIT_VARIABLES}  # nothing added, nothing changed
    assert _spin_count(stderr) == _expected(spin_count)


def test_the_policy_does_not_reach_a_runtime_that_loaded_first(tmp_path):
    # The control for the tests above: set after torch, the variable would not change what the runtime does, so
    # configure_openmp leaves the environment alone rather than claim a policy the process does not run with.
    code = "import os, torch, trl_dapo_ext.cli\nprint('policy', os.environ.get('OMP_WAIT_POLICY'))\n"
    env = {key: value for key, value in os.environ.items() if key not in WAIT_VARIABLES}
    env.update(PYTHONPATH=str(ROOT), OMP_DISPLAY_ENV="VERBOSE")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "policy None" in result.stdout
    assert _spin_count(result.stderr) == _expected("300000")  # libgomp's default: spin, then sleep


def test_the_runtime_reads_the_policy_configure_openmp_sets(tmp_path):
    code = "from trl_dapo_ext.cpu_threads import configure_openmp\nprint(configure_openmp())\nimport torch\n"
    env = {key: value for key, value in os.environ.items() if key not in WAIT_VARIABLES}
    env.update(PYTHONPATH=str(ROOT), OMP_DISPLAY_ENV="VERBOSE")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["set"]
    assert _spin_count(result.stderr) == _expected("0")


# --------------------------------------------------------------------------------------------------- unit tests


@pytest.mark.parametrize("user", WAIT_VARIABLES)
def test_configure_openmp_keeps_any_wait_variable_the_user_set(user):
    environ = {user: "42"}
    assert configure_openmp(environ, runtime_loaded=False) == "user"
    assert environ == {user: "42"}


def test_configure_openmp_sets_the_policy_once_and_never_too_late():
    environ: dict[str, str] = {}
    assert configure_openmp(environ, runtime_loaded=False) == "set"
    assert environ == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert configure_openmp(environ, runtime_loaded=False) == "user"  # a second call: the value is there already
    late: dict[str, str] = {}
    assert configure_openmp(late, runtime_loaded=True) == "late" and late == {}
    assert configure_openmp({}) == "late"  # this test process imported torch (conftest)


@pytest.mark.parametrize(
    ("cores", "busy", "quota", "at_most", "threads"),
    [
        (2, 0.0, None, None, 2),
        (2, 0.4, None, None, 2),  # a browser tab: both cores are still free enough
        (2, 0.5, None, None, 1),  # half a core taken counts as taken
        (2, 1.0, None, None, 1),  # the case: one busy process
        (2, 2.0, None, None, 1),  # never fewer than one
        (2, 5.0, None, None, 1),
        (1, 0.0, None, None, 1),
        (16, 3.2, None, None, 13),
        (16, 3.2, 4.0, None, 4),  # a container's --cpus 4
        (16, 0.0, 1.5, None, 1),  # whole CPUs of the quota only
        (16, 0.0, None, 2, 2),  # the demo's cap
        (2, 0.0, None, 8, 2),
    ],
)
def test_choose_threads(cores, busy, quota, at_most, threads):
    assert choose_threads(cores, busy, quota=quota, at_most=at_most) == threads


def test_busy_cores_sums_the_non_idle_share_of_the_process_cores(monkeypatch):
    samples = iter([(100.0, 400.0), (250.0, 600.0)])  # 150 of 200 ticks busy
    monkeypatch.setattr(cpu_threads, "_cpu_times", lambda cores: next(samples))
    monkeypatch.setattr(cpu_threads.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    busy, how = busy_cores(window_s=0.5)
    assert busy == pytest.approx(1.5) and how == "/proc/stat over 0.5 s"


def test_busy_cores_falls_back_to_the_load_average(monkeypatch):
    monkeypatch.setattr(cpu_threads, "_cpu_times", lambda cores: None)
    monkeypatch.setattr(cpu_threads.os, "getloadavg", lambda: (1.25, 0.0, 0.0), raising=False)
    assert busy_cores() == (1.25, "1-minute load average")


def test_resolve_threads_auto_records_what_it_measured(monkeypatch):
    monkeypatch.setattr(cpu_threads, "affinity_cores", lambda: 2)
    monkeypatch.setattr(cpu_threads, "cpu_quota", lambda: None)
    monkeypatch.setattr(cpu_threads, "busy_cores", lambda window_s: (1.04, "/proc/stat over 0.5 s"))
    choice = resolve_threads("auto", at_most=2)
    assert choice == ThreadChoice(1, "auto", cores=2, busy=1.04, measured_by="/proc/stat over 0.5 s", at_most=2)
    assert choice.describe().startswith("1 (auto: 2 cores, 1.0 of them kept busy by other processes")
    assert "--threads 1 repeats this run" in choice.describe()
    assert resolve_threads(2) == ThreadChoice(2, 2) and resolve_threads(2).describe() == "2 (as set)"
    with pytest.raises(ValueError, match="'auto' or a whole number"):
        resolve_threads(0)


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
def test_parse_threads_rejects_what_is_not_auto_or_a_count(value):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="expected auto or a whole number >= 1"):
        parse_threads(value)


def test_cpu_quota_reads_cgroup_v2_up_to_the_root_and_v1(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "proc/self").mkdir(parents=True)
    (v2 / "proc/self/cgroup").write_text("0::/user.slice/job\n")
    (v2 / "sys/fs/cgroup/user.slice/job").mkdir(parents=True)
    (v2 / "sys/fs/cgroup/user.slice/job/cpu.max").write_text("max 100000\n")
    (v2 / "sys/fs/cgroup/user.slice/cpu.max").write_text("250000 100000\n")  # the limit sits on the parent
    assert cpu_quota(v2) == 2.5

    v1 = tmp_path / "v1"
    (v1 / "proc/self").mkdir(parents=True)
    (v1 / "proc/self/cgroup").write_text("4:memory:/x\n2:cpu,cpuacct:/\n")
    (v1 / "sys/fs/cgroup/cpu,cpuacct").mkdir(parents=True)
    (v1 / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us").write_text("100000\n")
    assert cpu_quota(v1) is None  # -1: no limit
    (v1 / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us").write_text("50000\n")
    assert cpu_quota(v1) == 0.5
    assert parse_cpu_quota("nonsense") is None


def test_train_and_profile_thread_counts(monkeypatch):
    """`train` and `profile` on a CPU: a number is applied, ``auto`` keeps a count the environment sets, and without
    one takes the free cores (at least 1)."""
    import torch

    from trl_dapo_ext.cpu_threads import set_cpu_threads

    before = torch.get_num_threads()
    try:
        assert set_cpu_threads(1).threads == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        kept = set_cpu_threads("auto")
        assert kept.requested == "OMP_NUM_THREADS=1" and kept.threads == torch.get_num_threads()
        monkeypatch.delenv("OMP_NUM_THREADS")
        chosen = set_cpu_threads("auto")
        assert chosen.requested == "auto" and 1 <= chosen.threads == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_train_rejects_a_bad_thread_count(capsys):
    from trl_dapo_ext.cli.train import run as train_run

    argv = [
        "--threads",
        "0",
        "--model_name_or_path",
        "x",
        "--output_dir",
        "/tmp/x",
        "--use_cpu",
        "true",
        "--bf16",
        "false",
    ]
    assert train_run.main(argv) == 2
    assert "threads: expected auto or a whole number >= 1" in capsys.readouterr().err
