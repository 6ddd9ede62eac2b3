"""The quick demo's RL phase beside 0 and 1 busy processes, on 1 and 2 threads, with OpenMP's default wait policy
(workers spin before they sleep) and with the policy the package sets (``OMP_WAIT_POLICY=PASSIVE``).

A busy process is a Python loop at 100% of one core, started and killed by this script. Every run is a child
process (the wait policy is read once, when torch loads its OpenMP runtime) that trains from one shared warm start
with the quick demo's RL settings, pinned with its busy processes to the same ``--cores`` cores (2 by default, the
machine of the issue), so the contention is the same on any machine. "default" children import torch before the
package, so nothing sets a policy and the runtime keeps its default; "passive" children import the package first,
as every ``trl-dapo`` command does. Each run prints the spin count the runtime reports (libgomp, through
``OMP_DISPLAY_ENV=VERBOSE``) and a digest of the trained weights: for one thread count the digests must agree
across policies and load (the policy changes how threads wait, not what they compute).

It prints the RL seconds of every run and wall-time ratios measured in this one run: each run against the quiet
run of its thread count and policy, passive against default, and what ``--threads auto`` picks under each load.
Seconds depend on the machine: quote ratios from one run on an otherwise quiet machine.

    PYTHONPATH=. python benchmarks/cpu_contention.py --repeats 3     # 150 RL steps (the quick demo's), 8 cells
    PYTHONPATH=. python benchmarks/cpu_contention.py --steps 40      # shorter: 40 RL steps
    PYTHONPATH=. python benchmarks/cpu_contention.py --smoke         # a tiny model, 2 steps: checks the script
    PYTHONPATH=. python benchmarks/cpu_contention.py --steps 40 --policies default passive spin=10000
                                                                      # also a bounded spin: GOMP_SPINCOUNT=10000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trl_dapo_ext.cpu_threads import WAIT_VARIABLES, resolve_threads  # standard library only: no torch here

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("default", "passive")  # the policies every run compares; --policies adds bounded spins ("spin=N")
BUSY_LOOP = "while True:\n    pass\n"
# --smoke: the demo's tiny model, a fixed 2-step warm start and 2 RL steps of 2 prompts x 4 completions.
SMOKE = dict(
    model_size="tiny",
    num_problems=400,
    held_out=8,
    sft_steps=2,
    warm_start_target=None,
    prompts_per_step=2,
    num_generations=4,
)


# ---------------------------------------------------------------------------------------------------- children


def _settings(options: argparse.Namespace, output_dir: str):
    from trl_dapo_ext.cli.demo import QUICK, DemoSettings

    settings = DemoSettings(output_dir=output_dir, seed=options.seed, **QUICK)
    for key, value in (SMOKE if options.smoke else {}).items():
        setattr(settings, key, value)
    settings.rl_steps = options.steps
    return settings


def child_prepare(options: argparse.Namespace) -> None:
    """The quick demo's warm start (one thread), saved for every RL run to start from."""
    import torch

    from trl_dapo_ext.cli import demo

    torch.set_num_threads(1)
    settings = _settings(options, str(Path(options.work) / "warm-start"))
    _, sft_rows, _ = demo.split_problems(settings)
    tokenizer, model = demo.build_tokenizer_and_model(settings.model_size, settings.seed)
    steps = demo.warm_start(model, tokenizer, sft_rows, settings)
    torch.save(model.state_dict(), Path(options.work) / "warm.pt")
    print("RESULT " + json.dumps(dict(warm_start_steps=steps)))


def child_rl(options: argparse.Namespace) -> None:
    """One RL phase from the shared warm start; prints its seconds and a digest of the trained weights."""
    import hashlib
    import importlib
    import warnings

    # The order is the point. "default": torch first, so its OpenMP runtime loads before the package could set a
    # policy and keeps its default. "passive": the package first, as every trl-dapo command, which sets
    # OMP_WAIT_POLICY=PASSIVE before torch loads.
    # "spin=N": GOMP_SPINCOUNT=N in the environment (set by the parent), so the package keeps it as the user's choice.
    order = ("torch", "trl_dapo_ext.cli") if options.policy == "default" else ("trl_dapo_ext.cli", "torch")
    for module in order:
        importlib.import_module(module)
    import torch

    from reward_funcs import math_reward
    from trl_dapo_ext.cli import demo

    warnings.filterwarnings("ignore")
    torch.set_num_threads(options.threads)
    settings = _settings(options, str(Path(options.work) / f"rl-{options.policy}-{options.busy}-{options.threads}"))
    _, _, rl_rows = demo.split_problems(settings)
    tokenizer, model = demo.build_tokenizer_and_model(settings.model_size, settings.seed)
    model.load_state_dict(torch.load(Path(options.work) / "warm.pt"))
    torch.manual_seed(settings.seed)
    _, cost = demo.reinforce(model, tokenizer, rl_rows, settings, True, math_reward, "rl")
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
    waits = {name: os.environ.get(name) for name in WAIT_VARIABLES if os.environ.get(name)}
    result = dict(rl_seconds=cost["rl_seconds"], digest=digest.hexdigest()[:16], torch_threads=torch.get_num_threads())
    print("RESULT " + json.dumps(dict(result, wait_variables=waits)))


# ------------------------------------------------------------------------------------------------------ parent


def spin_count(policy: str) -> str | None:
    """The GOMP_SPINCOUNT a ``"spin=N"`` policy sets (``None`` for "default" and "passive")."""
    return policy.partition("=")[2] if policy.startswith("spin=") else None


def parse_policy(value: str) -> str:
    """An argparse ``type`` for ``--policies``: "default", "passive" or "spin=N" (a bounded spin of N)."""
    if value in POLICIES or (spin_count(value) or "").isdigit():
        return value
    raise argparse.ArgumentTypeError(f"expected default, passive or spin=N, got {value!r}")


def _child(options: argparse.Namespace, mode: str, *extra: str, policy: str = "default") -> dict:
    """Run this script as a child in ``mode``; returns its RESULT and the spin count its OpenMP runtime reported."""
    env = {key: value for key, value in os.environ.items() if key not in WAIT_VARIABLES}
    if spin_count(policy) is not None:
        env["GOMP_SPINCOUNT"] = spin_count(policy)  # the user's choice to the package: it sets nothing then
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_DISPLAY_ENV="VERBOSE",  # libgomp prints the settings it read when torch loads it (stderr)
    )
    command = [sys.executable, __file__, "--child", mode, "--work", options.work, "--seed", str(options.seed)]
    command += ["--steps", str(options.steps), *(["--smoke"] if options.smoke else []), *extra]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=options.timeout)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    spin = re.search(r"GOMP_SPINCOUNT = '(\d+)'", result.stderr)
    return dict(json.loads(lines[-1].removeprefix("RESULT ")), spin_count=spin[1] if spin else "n/a")


def _start_busy(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(count)]


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()


def _pin(cores: int) -> str:
    """Pin this process (and so every child and busy loop) to its first ``cores`` cores; says which."""
    if not hasattr(os, "sched_setaffinity"):
        return f"not pinned (no sched_setaffinity here; {os.cpu_count()} cores)"
    available = sorted(os.sched_getaffinity(0))
    chosen = available[:cores]
    os.sched_setaffinity(0, chosen)
    note = "" if len(chosen) == cores else f" (only {len(chosen)} available)"
    return f"cores {','.join(map(str, chosen))}{note}"


def run(options: argparse.Namespace) -> dict:
    options.work = options.work or tempfile.mkdtemp(prefix="cpu-contention-")
    pinned = _pin(options.cores)
    print(f"cpu_contention: {options.steps} RL steps per run, {pinned}, work dir {options.work}", flush=True)
    warm = _child(options, "prepare")
    print(f"warm start: {warm['warm_start_steps']} steps (one thread, shared by every run)", flush=True)

    runs, auto = [], {}
    for busy in options.busy:
        processes = _start_busy(busy)
        try:
            time.sleep(1.0 if busy else 0.0)  # the loops reach full speed before anything is measured
            auto[busy] = resolve_threads("auto", at_most=max(options.threads)).as_dict()
            for threads in options.threads:
                for policy in options.policies:
                    seconds = []
                    for _ in range(options.repeats):
                        extra = ("--threads", str(threads), "--policy", policy, "--busy", str(busy))
                        result = _child(options, "rl", *extra, policy=policy)
                        seconds.append(result["rl_seconds"])
                    row = dict(busy=busy, threads=threads, policy=policy, **result)
                    row["rl_seconds"] = statistics.median(seconds)
                    runs.append(row)
                    print(
                        f"  busy {busy}, {threads} thread(s), {policy:<11}: {row['rl_seconds']:7.1f} s "
                        f"(spin count {row['spin_count']}, weights {row['digest']})",
                        flush=True,
                    )
        finally:
            _stop(processes)
    return dict(
        steps=options.steps,
        smoke=options.smoke,
        pinned=pinned,
        policies=options.policies,
        warm_start=warm,
        runs=runs,
        auto=auto,
    )


def report(results: dict) -> None:
    """The table and the ratios, from one run's results."""
    seconds = {(r["busy"], r["threads"], r["policy"]): r["rl_seconds"] for r in results["runs"]}
    policies = results.get("policies", list(POLICIES))
    loads = sorted({r["busy"] for r in results["runs"]})
    thread_counts = sorted({r["threads"] for r in results["runs"]})
    print()
    print("Each cell: RL seconds, then the ratio to the quiet run of the same threads and policy, then to OpenMP's")
    print("default wait (spinning) at the same load and threads.")
    print()
    print("| busy processes | threads | " + " | ".join(policies) + " |")
    print("|---|---|" + "---|" * len(policies))
    for busy in loads:
        for threads in thread_counts:
            cells = []
            for policy in policies:
                value = seconds[busy, threads, policy]
                quiet, spin = seconds.get((0, threads, policy)), seconds.get((busy, threads, "default"))
                ratios = [
                    f"{value / quiet:.2f}x quiet" if quiet else "",
                    f"{value / spin:.2f}x default" if spin else "",
                ]
                cells.append(f"{value:.1f} s ({', '.join(filter(None, ratios))})")
            print(f"| {busy} | {threads} | " + " | ".join(cells) + " |")
    print()
    for busy in loads:
        if len(thread_counts) > 1:
            low, high = thread_counts[0], thread_counts[-1]
            ratios = ", ".join(
                f"{policy} {seconds[busy, high, policy] / seconds[busy, low, policy]:.2f}" for policy in policies
            )
            print(f"busy {busy}: {high} threads / {low} thread(s), wall time: {ratios}")
        choice = results["auto"][busy]
        print(f"busy {busy}: --threads auto picks {choice['threads']} ({choice['busy']} cores measured busy)")
    for threads in thread_counts:
        digests = {r["digest"] for r in results["runs"] if r["threads"] == threads}
        verdict = "identical" if len(digests) == 1 else f"DIFFERENT ({len(digests)} digests)"
        print(f"{threads} thread(s): trained weights across policies and loads: {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--steps", type=int, default=None, help="RL steps per run (default: the quick demo's 150; 2 with --smoke)"
    )
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1], help="busy processes beside a run (0 1)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads of a run (1 2)")
    parser.add_argument("--cores", type=int, default=2, help="pin runs and busy loops to this many cores (2)")
    parser.add_argument(
        "--policies",
        type=parse_policy,
        nargs="+",
        default=list(POLICIES),
        help="wait policies to compare: default, passive, spin=N (GOMP_SPINCOUNT=N) (default passive)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per cell; the median is reported (1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="a tiny model and 2 steps: checks the script quickly")
    parser.add_argument("--output", default=None, help="write the results as JSON here")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one child may take (3600)")
    # A child run (this script starts them): what it does, where the warm start is, its threads, policy and load.
    parser.add_argument("--child", choices=("prepare", "rl"), help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--policy", type=parse_policy, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.steps is None:
        # This process never imports torch; the wait policy the import sets here is removed from every child's
        # environment (_child), so each child's policy is only the one it asks for.
        from trl_dapo_ext.cli.demo import QUICK

        options.steps = 2 if options.smoke else QUICK["rl_steps"]
    if options.child == "prepare":
        child_prepare(options)
        return 0
    if options.child == "rl":
        options.threads, options.busy = options.threads[0], options.busy[0]
        child_rl(options)
        return 0
    results = run(options)
    report(results)
    if options.output:
        Path(options.output).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
