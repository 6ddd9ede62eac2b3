"""Run `trl-dapo demo` for several seeds under several CPU kernel paths and print one table of the results.

The demo's gain must not hinge on which float kernels a CPU has, so this runs it under
``ATEN_CPU_CAPABILITY=default`` (plain C++ kernels), ``avx2`` and the machine's native path (variable unset), and
records, per run, held-out sampled accuracy before and after RL, the gain, the wall time and the CPU time of the whole
process tree (the demo and its verifier workers; on a shared machine the CPU time is the fair measure). Where the
native path is one of the named ones (a machine whose best kernels are AVX2), its runs would repeat those bit for bit,
so they are not run: the summary counts distinct runs only.

    python benchmarks/demo_matrix.py --seeds 0 1 2 --jobs 1            # the README's 9 runs, one at a time
    python benchmarks/demo_matrix.py --seeds 0 --paths default -- --quick   # extra demo options after --
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median

PATHS = ("default", "avx2", "native")


def run_one(seed: int, path: str, out_dir: Path, extra: list[str]) -> dict:
    """One demo run in a child process; returns its before/after accuracies and its wall and CPU seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if path != "native":
        env["ATEN_CPU_CAPABILITY"] = path
    command = [sys.executable, "-m", "trl_dapo_ext.cli.main", "demo", "--seed", str(seed)]
    command += ["--output-dir", str(out_dir), *extra]
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(out_dir / "demo.log", "w") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        # Reap it with wait4 (not Popen.wait) for this child's own rusage, its reaped verifier workers included.
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise RuntimeError(f"seed {seed}, {path}: the demo failed, see {out_dir / 'demo.log'}")
    summary = json.loads((out_dir / "demo_results.json").read_text())
    before, after = summary["before"]["sampled"], summary["results"]["dapo"]["after"]["sampled"]
    cpu = usage.ru_utime + usage.ru_stime
    threads = summary["settings"]["threads"]  # the count the run used (--threads auto picks it at the start)
    return dict(
        seed=seed,
        path=path,
        threads=threads,
        before=before,
        after=after,
        gain=100 * (after - before),
        wall=wall,
        cpu=cpu,
    )


def native_path() -> str:
    """The kernel path torch picks here without ATEN_CPU_CAPABILITY ("default", "avx2", "avx512", ...)."""
    env = {key: value for key, value in os.environ.items() if key != "ATEN_CPU_CAPABILITY"}
    code = "import torch; print(torch.backends.cpu.get_cpu_capability().lower())"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at once. Each demo picks its threads when it starts (--threads auto, at most 2; 1 with --quick) "
        "and runs started together do not see each other yet: with --jobs > 1 pass '-- --threads 1'",
    )
    parser.add_argument("--output-dir", default=None, help="where the runs go (default: a temporary directory)")
    parser.add_argument("demo_args", nargs="*", help="extra `trl-dapo demo` options, after --")
    options = parser.parse_args(argv)
    root = Path(options.output_dir or tempfile.mkdtemp(prefix="demo-matrix-"))
    paths = list(options.paths)
    native = native_path()
    if "native" in paths and native in paths:
        paths.remove("native")
        print(f"the native kernel path is {native}: its runs would repeat the {native} runs, so they are not run")
    jobs = [(seed, path) for seed in options.seeds for path in paths]
    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        rows = list(pool.map(lambda job: run_one(*job, root / f"seed{job[0]}-{job[1]}", options.demo_args), jobs))

    print("| seed | kernel path | threads | sampled before | sampled after | gain | wall | CPU time |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['seed']} | {r['path']} | {r['threads']} | {r['before']:.1%} | {r['after']:.1%} | {r['gain']:+.1f} pt "
            f"| {r['wall']:.0f} s | {r['cpu']:.0f} s |"
        )
    for key, unit in (("gain", "pt"), ("wall", "s"), ("cpu", "s")):
        values = [r[key] for r in rows]
        print(
            f"{key} over {len(rows)} distinct runs: min {min(values):.1f} {unit}, median {median(values):.1f} {unit}, "
            f"max {max(values):.1f} {unit}"
        )
    (root / "matrix.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
