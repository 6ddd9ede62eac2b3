"""CPU threads for the package's entry points: OpenMP workers that sleep while they wait, and a thread count taken
from the cores other processes leave free.

Why: torch runs its CPU kernels on an OpenMP runtime (GNU libgomp in the PyPI wheels, Intel's or LLVM's
libomp in some other builds). By default a worker that finishes its share of a parallel region spins on its core
for a while before it sleeps (libgomp: 300,000 spins). When another process holds one of the cores, the spinning
workers and that process take turns on it, and every region waits for its slowest worker (measured times, and the
benchmark that measures them: docs/troubleshooting.md, "Slow on a busy machine"). With
``OMP_WAIT_POLICY=PASSIVE`` the workers sleep at once (libgomp's spin count becomes 0, libomp's block time 0); the
policy changes how threads wait, never how work is split, so results are bit-identical.

Both runtimes read their environment once, when they are loaded, which happens at ``import torch``: setting the
variable afterwards changes nothing in that process. So :func:`configure_openmp` runs in
``trl_dapo_ext/cli/__init__.py``, which Python imports before any ``trl-dapo`` subcommand module (all of them, and
``python -m trl_dapo_ext.cli.train``), and the notebooks call it before their first ``import torch``.

``--threads auto`` (the demo's default) calls :func:`resolve_threads`: the cores this process may run on (affinity
and a cgroup CPU quota), minus the cores other processes keep busy (measured over half a second), at least 1.

Example:
    >>> env = {}
    >>> configure_openmp(env, runtime_loaded=False)
    'set'
    >>> env
    {'OMP_WAIT_POLICY': 'PASSIVE'}
    >>> choose_threads(cores=2, busy=1.0)  # one of two cores busy: one thread
    1
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

# The variables that decide how OpenMP workers wait. The user setting any of them means they chose: nothing is set.
# GOMP_SPINCOUNT (libgomp) overrides the spin count OMP_WAIT_POLICY implies, KMP_BLOCKTIME and KMP_LIBRARY (Intel /
# LLVM libomp) override its block time and mode.
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "KMP_LIBRARY")
PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}  # the standard variable: libgomp and libomp both honour it

# Shared-library names of the OpenMP runtimes torch is built with, as they appear in /proc/self/maps.
_RUNTIMES = ("libgomp", "libiomp", "libomp")

WaitStatus = Literal["set", "user", "late"]
_status: WaitStatus | None = None  # what the first configure_openmp call in this process did


def openmp_runtime_loaded() -> bool:
    """Whether an OpenMP runtime is already loaded in this process (so it has read its environment already).

    Linux: any libgomp / libiomp / libomp mapped into the process. Elsewhere: whether torch has been imported.

    Example:
        >>> import torch
        >>> openmp_runtime_loaded()
        True
    """
    if "torch" in sys.modules:
        return True
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return False
    return any(f"/{name}" in maps for name in _RUNTIMES)


def configure_openmp(
    environ: MutableMapping[str, str] | None = None, *, runtime_loaded: bool | None = None
) -> WaitStatus:
    """Make OpenMP workers sleep instead of spinning while they wait: ``OMP_WAIT_POLICY=PASSIVE``.

    Call it before anything imports torch. Returns ``"set"`` (the variable is now in ``environ``), ``"user"`` (one
    of :data:`WAIT_VARIABLES` was already set: the user's choice is kept, nothing changes) or ``"late"`` (an OpenMP
    runtime is already loaded and read its environment: nothing changes, so that the environment does not claim a
    policy the process is not running with). ``environ`` defaults to ``os.environ``; ``runtime_loaded`` to
    :func:`openmp_runtime_loaded`.

    Example:
        >>> configure_openmp({"OMP_WAIT_POLICY": "ACTIVE"}, runtime_loaded=False)  # the user's value stays
        'user'
        >>> configure_openmp({"GOMP_SPINCOUNT": "10000"}, runtime_loaded=False)
        'user'
        >>> env = {}
        >>> configure_openmp(env, runtime_loaded=True), env  # too late for this process
        ('late', {})
    """
    global _status
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in WAIT_VARIABLES):
        status: WaitStatus = "user"
    elif openmp_runtime_loaded() if runtime_loaded is None else runtime_loaded:
        status = "late"
    else:
        environ.update(PASSIVE)
        status = "set"
    if environ is os.environ and _status is None:
        _status = status
    return status


def openmp_settings(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """What decides how OpenMP workers wait in this process, for a run's results file.

    ``configured`` is what :func:`configure_openmp` did here (``None`` if it was not called), then each of
    :data:`WAIT_VARIABLES` that is set, with its value.

    Example:
        >>> openmp_settings({"OMP_WAIT_POLICY": "PASSIVE"})["OMP_WAIT_POLICY"]
        'PASSIVE'
    """
    environ = os.environ if environ is None else environ
    return {"configured": _status, **{name: environ[name] for name in WAIT_VARIABLES if environ.get(name)}}


# ---------------------------------------------------------------------------------------------------------------------
# How many threads
# ---------------------------------------------------------------------------------------------------------------------


def affinity_cores() -> int:
    """The number of cores this process may run on (its affinity mask; all cores where there is none).

    Example:
        >>> affinity_cores() >= 1
        True
    """
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def parse_cpu_quota(cpu_max: str) -> float | None:
    """CPUs a cgroup v2 ``cpu.max`` line (``"QUOTA PERIOD"`` or ``"max PERIOD"``) allows; ``None`` for no limit.

    Example:
        >>> parse_cpu_quota("150000 100000"), parse_cpu_quota("max 100000")
        (1.5, None)
    """
    fields = cpu_max.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = float(fields[0]), float(fields[1])
    return quota / period if quota > 0 and period > 0 else None


def cpu_quota(root: Path = Path("/")) -> float | None:
    """CPUs this process's cgroup may use (a container's ``--cpus``), or ``None`` when unlimited or unknown.

    cgroup v2: the smallest ``cpu.max`` from the process's cgroup up to the root; v1: ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``. ``root`` is the file system root to read from (a test's fake tree).

    Example:
        >>> cpu_quota(Path("/no/such/root")) is None
        True
    """
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        relative = path.strip("/")
        if controllers == "":  # cgroup v2 (unified): the quota can be on any ancestor
            parts = relative.split("/") if relative else []
            for depth in range(len(parts), -1, -1):
                try:
                    text = (root / "sys/fs/cgroup" / "/".join(parts[:depth]) / "cpu.max").read_text()
                except OSError:
                    continue
                quotas.append(parse_cpu_quota(text))
        elif "cpu" in controllers.split(","):  # cgroup v1
            for folder in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                base = root / "sys/fs/cgroup" / folder
                for candidate in (base / relative, base):
                    try:
                        quota = float((candidate / "cpu.cfs_quota_us").read_text())
                        period = float((candidate / "cpu.cfs_period_us").read_text())
                    except (OSError, ValueError):
                        continue
                    quotas.append(quota / period if quota > 0 and period > 0 else None)
                    break
    limits = [quota for quota in quotas if quota is not None]
    return min(limits) if limits else None


def _cpu_times(cores: set[int] | None) -> tuple[float, float] | None:
    """(busy, total) clock ticks since boot over ``cores`` (all when ``None``), from /proc/stat; ``None`` elsewhere."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    busy = total = 0.0
    for line in lines:
        name, *values = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()) or (cores is not None and int(name[3:]) not in cores):
            continue
        # user nice system idle iowait irq softirq steal (guest time is already counted in user). Steal counts as
        # busy: on a VM it is time the host gave to someone else.
        ticks = [float(value) for value in values[:8]]
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    return (busy, total) if total else None


def busy_cores(window_s: float = 0.5) -> tuple[float, str]:
    """How many of this process's cores other processes keep busy, and how that was measured.

    Linux: the non-idle share of each core in the affinity mask over ``window_s`` seconds of /proc/stat, summed, while
    this process sleeps (so it does not count itself). Elsewhere: the 1-minute load average (slower to react), or 0
    where there is none.

    Example:
        >>> busy, how = busy_cores(window_s=0.05)
        >>> busy >= 0.0 and isinstance(how, str)
        True
    """
    cores = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    first = _cpu_times(cores)
    if first is not None:
        time.sleep(window_s)
        second = _cpu_times(cores)
        if second is not None and second[1] > first[1]:
            share = (second[0] - first[0]) / (second[1] - first[1])
            count = len(cores) if cores is not None else (os.cpu_count() or 1)
            return max(0.0, share * count), f"/proc/stat over {window_s:g} s"
    if hasattr(os, "getloadavg"):
        return max(0.0, os.getloadavg()[0]), "1-minute load average"
    return 0.0, "no load measurement on this platform"


def choose_threads(cores: int, busy: float, quota: float | None = None, at_most: int | None = None) -> int:
    """Threads for ``cores`` usable cores of which other processes keep ``busy`` busy: the free ones, at least 1.

    A core more than half used by other processes counts as taken (``busy`` rounds half up): a thread on it would run
    at half speed or less, and every parallel region waits for its slowest thread. A cgroup ``quota`` caps the count
    at the whole CPUs it pays for; ``at_most`` caps it too (a caller's tested maximum).

    Example:
        >>> choose_threads(cores=2, busy=0.1), choose_threads(cores=2, busy=0.6), choose_threads(cores=2, busy=2.0)
        (2, 1, 1)
        >>> choose_threads(cores=16, busy=3.2, quota=4.0), choose_threads(cores=16, busy=0.0, at_most=2)
        (4, 2)
    """
    threads = cores - math.floor(busy + 0.5)
    if quota is not None:
        threads = min(threads, math.floor(quota))
    if at_most is not None:
        threads = min(threads, at_most)
    return max(1, threads)


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count and where it came from (recorded in a run's results)."""

    threads: int
    requested: int | str  # "auto" or the number asked for
    cores: int | None = None  # cores in the affinity mask (auto only)
    quota: float | None = None  # cgroup CPU quota (auto only)
    busy: float | None = None  # cores' worth of other processes' CPU use (auto only)
    measured_by: str | None = None
    at_most: int | None = None

    def describe(self) -> str:
        """One line for the console, e.g. ``1 (auto: 2 cores, 1.0 of them kept busy by other processes ...)``.

        Example:
            >>> ThreadChoice(threads=1, requested=1).describe()
            '1 (as set)'
        """
        if self.requested != "auto":
            return f"{self.threads} (as set)"
        limits = [f"{self.cores} cores, {self.busy:.1f} of them kept busy by other processes ({self.measured_by})"]
        if self.quota is not None:
            limits.append(f"a CPU quota of {self.quota:g}")
        if self.at_most is not None:
            limits.append(f"at most {self.at_most}")
        return f"{self.threads} (auto: {', '.join(limits)}; --threads {self.threads} repeats this run)"

    def as_dict(self) -> dict:
        """The fields, for JSON."""
        return asdict(self)


def parse_threads(value: str) -> int | str:
    """An argparse ``type`` for ``--threads``: ``"auto"`` or a whole number >= 1.

    Example:
        >>> parse_threads("auto"), parse_threads("2")
        ('auto', 2)
    """
    if value == "auto":
        return value
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 1, got {value!r}")
    return threads


def resolve_threads(requested: int | str, at_most: int | None = None, window_s: float = 0.5) -> ThreadChoice:
    """The thread count for ``requested`` (``"auto"`` or a number, kept as is): see :func:`choose_threads`.

    Example:
        >>> resolve_threads(3).threads
        3
        >>> 1 <= resolve_threads("auto", at_most=2, window_s=0.05).threads <= 2
        True
    """
    if requested != "auto":
        if not isinstance(requested, int) or requested < 1:
            raise ValueError(f"threads must be 'auto' or a whole number >= 1, got {requested!r}")
        return ThreadChoice(threads=requested, requested=requested)
    cores, quota = affinity_cores(), cpu_quota()
    busy, measured_by = busy_cores(window_s)
    threads = choose_threads(cores, busy, quota=quota, at_most=at_most)
    return ThreadChoice(
        threads=threads,
        requested="auto",
        cores=cores,
        quota=quota,
        busy=round(busy, 2),
        measured_by=measured_by,
        at_most=at_most,
    )


def set_cpu_threads(requested: int | str, at_most: int | None = None) -> ThreadChoice | None:
    """Resolve ``requested`` (``"auto"`` or a number) and give torch that many CPU threads, for runs on the CPU.

    Returns the choice (for the console and the run's results), or None where a CUDA device does the work and
    torch's CPU threads are left as they are. ``auto`` keeps a count the environment sets (``OMP_NUM_THREADS``: the
    user chose). Call it before the run starts, while this process is idle: ``auto`` measures what other processes
    use.

    Example:
        >>> choice = set_cpu_threads(1)
        >>> choice is None or choice.describe()
        '1 (as set)'
    """
    import torch

    if torch.cuda.is_available():
        return None
    if requested == "auto" and os.environ.get("OMP_NUM_THREADS"):
        return ThreadChoice(
            threads=torch.get_num_threads(), requested=f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
        )
    choice = resolve_threads(requested, at_most=at_most)
    torch.set_num_threads(choice.threads)
    return choice
