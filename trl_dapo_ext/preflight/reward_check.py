"""Run a reward function on the battery, one completion per call, and tabulate the verdicts per category.

A call that raises is an *exception* (it would crash a training step); a call still running after ``timeout_s`` is
interrupted and counted as a *timeout* (it would stall one). The interruption is a SIGINT that a timer sends to the
main thread, so it stops Python code, sleeps and waits; code stuck in native code that never returns to the
interpreter is stopped by :func:`hard_deadline` instead, which ends the process with a traceback.

A false positive is a case that should fail (every category but ``correct``) scoring at least ``threshold``. The
check fails on a false positive in a gating category, and on any exception (a reward that raises, returns the wrong
number of rewards or something other than a number would crash the training step that calls it).

Example:
    >>> from trl_dapo_ext.preflight.battery import math_cases
    >>> def substring(completions, answer, **kwargs):  # the weak reward: the gold appears somewhere
    ...     return [float(str(a) in c) for c, a in zip(completions, answer)]
    >>> results = run_cases(substring, math_cases(["42"]), [{"answer": "42"}], chat=False)
    >>> table = summarize(results)
    >>> table["hedge"].false_positives > 0, failed(table)
    (True, True)
"""

from __future__ import annotations

import faulthandler
import math
import numbers
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .battery import CATEGORIES, NOT_GATING, SHOULD_PASS, Case

DEFAULT_TIMEOUT_S = 30.0  # generous: a slow first call (worker start-up on a busy machine) is no hang
DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True)
class CaseResult:
    """The verdict of one case: its score (None if the reward abstained), error text, timeout, milliseconds."""

    case: Case
    score: float | None
    error: str | None = None
    timed_out: bool = False
    ms: float = 0.0


class _Deadline(BaseException):
    """Raised inside the reward at its deadline: a BaseException, so ``except Exception`` in a reward cannot eat it."""


def call_with_timeout(fn: Callable[[], Any], timeout_s: float) -> Any:
    """``fn()``, or :class:`TimeoutError` once it has run ``timeout_s`` seconds (main thread only).

    At the deadline a timer thread sends SIGINT to the main thread (a real signal, so sleeps and blocking waits
    wake up) and a temporary handler raises inside ``fn``; a call that returns after its deadline counts as
    timed out too.

    >>> call_with_timeout(lambda: 7, 1.0)
    7
    >>> call_with_timeout(lambda: time.sleep(30), 0.05)
    Traceback (most recent call last):
    ...
    TimeoutError: still running after 0.05 s
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("call_with_timeout interrupts the main thread: call it from the main thread")
    lock = threading.Lock()
    state = {"done": False, "fired": False}
    main = threading.main_thread().ident

    def fire() -> None:
        with lock:
            if state["done"]:
                return
            state["fired"] = True
        signal.pthread_kill(main, signal.SIGINT)

    def on_sigint(signum: int, frame: Any) -> None:
        if state["fired"]:
            raise _Deadline
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    timer = threading.Timer(timeout_s, fire)
    timer.daemon = True
    try:
        timer.start()
        try:
            value = fn()
        finally:
            with lock:
                state["done"] = True
            timer.cancel()
        if state["fired"]:
            time.sleep(0.05)  # the signal is on its way: let it land inside this try
            raise _Deadline
        return value
    except _Deadline:
        raise TimeoutError(f"still running after {timeout_s:g} s") from None
    finally:
        signal.signal(signal.SIGINT, previous)


def hard_deadline(seconds: float | None) -> None:
    """Arm (or with None, disarm) a last-resort stop: after ``seconds`` the process prints every thread's traceback
    and exits with status 1. It runs outside the interpreter, so it fires even when a reward is stuck in native
    code that the timeout of :func:`call_with_timeout` cannot interrupt."""
    faulthandler.cancel_dump_traceback_later()
    stream = sys.__stderr__  # the real stderr: the watchdog writes to its file descriptor, not to a Python object
    if seconds is not None and stream is not None:
        faulthandler.dump_traceback_later(seconds, exit=True, file=stream)


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _as_score(value: Any) -> float | None:
    if value is None:
        return None
    if not isinstance(value, numbers.Real):  # TRL turns the list into a float tensor: numbers (and bools) only
        raise TypeError(f"returned {value!r} ({type(value).__name__}); a reward must be a float or None")
    return float(value)


def run_cases(
    reward: Callable[..., Sequence[Any]],
    cases: Sequence[Case],
    rows: Sequence[dict[str, Any]],
    *,
    chat: bool = True,
    prompt_column: str = "prompt",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Callable[[int, int], None] | None = None,
) -> list[CaseResult]:
    """Call ``reward`` once per case, as TRL's GRPOTrainer would for a batch of one completion.

    The keyword arguments are ``prompts``, ``completions`` (a list of one assistant message when ``chat``, else
    the text), every other column of the case's row (as a one-element list), and no-op ``log_extra`` and
    ``log_metric``. ``completion_ids`` and ``trainer_state`` are not passed (there is no tokenizer or trainer).
    """
    results = []
    try:
        for position, case in enumerate(cases):
            row = rows[case.row]
            columns = {key: [value] for key, value in row.items() if key != prompt_column}
            completion: Any = [{"role": "assistant", "content": case.completion}] if chat else case.completion
            kwargs = dict(columns, prompts=[row.get(prompt_column)], log_extra=_noop, log_metric=_noop)
            hard_deadline(max(3 * timeout_s, timeout_s + 30))  # re-armed per call
            started = time.perf_counter()
            score, error, timed_out = None, None, False
            try:
                out = call_with_timeout(lambda c=completion, k=kwargs: reward([c], **k), timeout_s)
                out = list(out)
                if len(out) != 1:
                    raise ValueError(f"returned {len(out)} rewards for 1 completion")
                score = _as_score(out[0])
                if score is not None and math.isnan(score):
                    score = None  # TRL treats NaN like None (nanmean/nansum): the reward abstains
            except TimeoutError:
                timed_out = True
            except Exception as exc:  # noqa: BLE001 - any exception of the user's reward is a finding
                error = f"{type(exc).__name__}: {exc}"[:300]
            ms = (time.perf_counter() - started) * 1000
            results.append(CaseResult(case, score, error, timed_out, ms))
            if progress is not None:
                progress(position + 1, len(cases))
    finally:
        hard_deadline(None)
    return results


@dataclass
class CategoryRow:
    """One line of the table: the verdicts of one category."""

    category: str
    cases: int = 0
    scores: list[float] = field(default_factory=list)
    passed: int = 0  # scored >= threshold
    false_positives: int = 0
    nones: int = 0
    exceptions: int = 0
    timeouts: int = 0
    ms: list[float] = field(default_factory=list)

    @property
    def mean_score(self) -> float | None:
        return statistics.fmean(self.scores) if self.scores else None

    @property
    def false_positive_rate(self) -> float | None:
        return None if self.category in SHOULD_PASS or not self.cases else self.false_positives / self.cases

    @property
    def none_rate(self) -> float:
        return self.nones / self.cases if self.cases else 0.0

    @property
    def median_ms(self) -> float:
        return statistics.median(self.ms) if self.ms else 0.0

    @property
    def max_ms(self) -> float:
        return max(self.ms) if self.ms else 0.0


def summarize(results: Sequence[CaseResult], threshold: float = DEFAULT_THRESHOLD) -> dict[str, CategoryRow]:
    """Per category (in :data:`CATEGORIES` order), the counts of :class:`CategoryRow`."""
    table: dict[str, CategoryRow] = {}
    for name in CATEGORIES:
        if any(r.case.category == name for r in results):
            table[name] = CategoryRow(name)
    for r in results:
        row = table[r.case.category]
        row.cases += 1
        row.ms.append(r.ms)
        if r.timed_out:
            row.timeouts += 1
        elif r.error is not None:
            row.exceptions += 1
        elif r.score is None:
            row.nones += 1
        else:
            row.scores.append(r.score)
            if r.score >= threshold:
                row.passed += 1
                if not r.case.should_pass:
                    row.false_positives += 1
    return table


def failed(table: dict[str, CategoryRow]) -> bool:
    """Whether the battery found a false positive in a gating category, or the reward raised on any case (it would
    crash a training step); the command then exits with status 1."""
    return any(row.exceptions for row in table.values()) or any(
        row.false_positives for name, row in table.items() if name not in NOT_GATING
    )


def exception_finding(results: Sequence[CaseResult]) -> str | None:
    """One line for every exception of the run: how many calls raised, and the first exception (None if none did).

    A reward that raises usually raises on every call, so one line per category would repeat the same message.
    """
    errors = [r for r in results if r.error is not None]
    if not errors:
        return None
    first = errors[0]
    return (
        f"DANGER: the reward raised on {len(errors)}/{len(results)} calls (a training step would crash); first, on "
        f"{first.case.category} / {first.case.name}: {first.error}"
    )


def findings(results: Sequence[CaseResult], threshold: float = DEFAULT_THRESHOLD) -> list[str]:
    """Lines naming what went wrong, most dangerous first: exceptions (one line), false positives, timeouts, rejected
    golds."""
    by_name: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        by_name.setdefault((r.case.category, r.case.name), []).append(r)
    danger, warn = [], []
    for (category, name), group in by_name.items():
        n = len(group)
        fps = [r for r in group if not r.case.should_pass and r.score is not None and r.score >= threshold]
        if fps:
            example = fps[0].case.completion
            example = example if len(example) <= 80 else example[:77] + "..."
            label = "WARNING (policy)" if category in NOT_GATING else "DANGER"
            line = f"{label}: false positive, {category} / {name}: {len(fps)}/{n} rows rewarded, e.g. {example!r}"
            (warn if category in NOT_GATING else danger).append(line)
        timeouts = sum(r.timed_out for r in group)
        if timeouts:
            danger.append(f"DANGER: timeout, {category} / {name}: {timeouts}/{n} calls (a training step would stall)")
        if category in SHOULD_PASS:
            rejected = [r for r in group if r.score is not None and r.score < threshold]
            nones = sum(r.score is None and r.error is None and not r.timed_out for r in group)
            if rejected:
                example = rejected[0].case.completion.replace("\n", " ")
                example = example if len(example) <= 80 else "..." + example[-77:]  # the answer is at the end
                warn.append(
                    f"warning: false negative, {category} / {name}: {len(rejected)}/{n} scored low, e.g. {example!r}"
                )
            if nones:
                warn.append(f"warning: reward None, {category} / {name}: {nones}/{n} (gold not parseable?)")
    crashed = exception_finding(results)
    return ([crashed] if crashed else []) + danger + warn


def format_table(table: dict[str, CategoryRow]) -> str:
    """The table as Markdown (the command prints it; docs/preflight.md shows two of them).

    Columns: cases, mean score, false-positive rate (for ``correct``: the share that passed), None rate,
    exceptions, timeouts, median and max milliseconds per call.
    """
    lines = [
        "| category | cases | mean score | false positives | None | exceptions | timeouts | median ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in table.items():
        mean = "-" if row.mean_score is None else f"{row.mean_score:.2f}"
        if name in SHOULD_PASS:
            fp = f"(passed {row.passed / row.cases:.0%})" if row.cases else "-"
        else:
            fp = f"{row.false_positive_rate:.0%}" + ("" if name not in NOT_GATING else " (not gating)")
        lines.append(
            f"| {name} | {row.cases} | {mean} | {fp} | {row.none_rate:.0%} | {row.exceptions} | {row.timeouts} | "
            f"{row.median_ms:.1f} | {row.max_ms:.1f} |"
        )
    return "\n".join(lines)
