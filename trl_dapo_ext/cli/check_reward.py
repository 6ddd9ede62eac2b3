"""`trl-dapo check-reward`: test a reward function on known good, wrong, malformed and adversarial completions.

The battery is built from the dataset's own golds (see ``trl_dapo_ext/preflight/battery.py``): the gold in the
common answer formats (should score high), near misses, hedges, the gold mentioned but not given, format without
substance, empty / huge / unicode / injection completions, the gold only inside unfinished reasoning, zero
denominators and power towers; for code rewards, the cheats a sandbox must defeat (``sys.exit(0)``, ``SkipTest``,
objects equal to everything, ...). It prints one table row per category and the dangerous findings, and exits
with status 1 when a completion that should fail was rewarded (a false positive) or the reward raised (it would
crash a training step), so it can gate a run:

    trl-dapo check-reward math_reward --dataset data/train.jsonl --answer-column answer
    trl-dapo check-reward trl.rewards.accuracy_reward --dataset data/train.jsonl      # needs a `solution` column
    trl-dapo check-reward my_rewards:strict_match --dataset data/train.jsonl
    trl-dapo check-reward code_reward --dataset mbpp.jsonl --tests-column test_list --solution-column code
    trl-dapo check-reward math_reward --completions tests/data/smollm2_completions.jsonl

``--completions FILE`` scores completions a model actually wrote instead of the battery: a ``.jsonl`` file, one row
per completion with ``completion``, its gold (``answer``, or ``--answer-column``), a ``label`` (``right``: its final
answer is the gold, ``wrong``) and optionally a ``format`` (how the answer is written). The table counts the
rewarded right ones (``model_right``) and the false positives (``model_wrong``); the findings list the false
negatives (right answer, no credit) per format.

REWARD is a library name (as in a recipe's ``reward_funcs``), or a dotted path to your own function,
``package.module.function`` or ``package.module:function`` (modules in the working directory are importable).
Each call gets ``prompts``, ``completions`` (chat messages when the prompts are conversational) and the row's
columns as keyword arguments, one completion per call, as TRL's GRPOTrainer passes them.

Exit status: 0 no false positive, 1 a false positive in a gating category or an exception, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trl_dapo_ext.preflight.battery import CATEGORIES, NOT_GATING, code_cases, labelled_cases, math_cases
from trl_dapo_ext.preflight.reward_check import (
    DEFAULT_THRESHOLD,
    DEFAULT_TIMEOUT_S,
    failed,
    findings,
    format_table,
    run_cases,
    summarize,
)


class CheckError(ValueError):
    """Bad input, reported in one line (exit status 2)."""


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("reward", metavar="REWARD", help="library reward name, or module.function / module:function")
    parser.add_argument(
        "--dataset", default=None, help="a .json/.jsonl/.csv/.parquet file, a save_to_disk folder or a hub id"
    )
    parser.add_argument(
        "--completions",
        default=None,
        metavar="FILE",
        help="instead of the battery: a .jsonl of labelled completions a model wrote (completion, answer, label, format)",
    )
    parser.add_argument("--dataset-config", default=None, help="hub dataset configuration (GSM8K: main)")
    parser.add_argument("--split", default="train", help="dataset split (default: train)")
    parser.add_argument(
        "--answer-column",
        default=None,
        help="column with the gold answer, passed as `answer` like trl-dapo train does (default: answer, solution)",
    )
    parser.add_argument("--prompt-column", default=None, help="column with the prompt (default: prompt if present)")
    parser.add_argument(
        "--tests-column", default=None, help="code rewards: column with the unit tests, passed as `tests`"
    )
    parser.add_argument(
        "--solution-column", default=None, help="code rewards: column with a reference solution (the correct cases)"
    )
    parser.add_argument(
        "--kind",
        choices=["auto", "math", "code"],
        default="auto",
        help="battery kind (auto: code when a tests column is given or the reward's name says code)",
    )
    parser.add_argument("--rows", type=int, default=20, help="dataset rows (golds) to build the battery from (20)")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help=f"seconds per call ({DEFAULT_TIMEOUT_S:g})"
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"a score at or above this counts as rewarded ({DEFAULT_THRESHOLD:g})",
    )
    parser.add_argument(
        "--completion-format",
        choices=["auto", "chat", "text"],
        default="auto",
        help="completions as chat messages or plain text (auto: like TRL, chat when the prompts are)",
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="also write every case's verdict to PATH")
    parser.add_argument("--debug", action="store_true", help="on an error, also print its traceback")
    return parser


def resolve_reward(name: str):
    """The reward callable for a library name or a dotted path (``a.b.f`` or ``a.b:f``)."""
    from trl_dapo_ext.cli.train import TrainError, resolve_reward_funcs

    dotted = name.replace(":", ".") if name.count(":") == 1 else name
    try:
        return resolve_reward_funcs([dotted])[0]
    except TrainError as error:
        raise CheckError(str(error)) from None


def load_rows(options) -> tuple[list[dict], str, str]:
    """The first ``--rows`` dataset rows with a gold, the gold column's name and the prompt column's name."""
    from trl_dapo_ext.cli.train import TrainError, TrainScriptArguments, load_train_dataset

    if options.rows < 1:
        raise CheckError(f"--rows must be >= 1, got {options.rows}")
    # The answer / tests columns are renamed to `answer` / `tests` exactly as `trl-dapo train` does, so the reward
    # sees the keyword arguments it would see in training; without those options the columns keep their names.
    script = TrainScriptArguments(
        dataset_name=options.dataset,
        dataset_config=options.dataset_config,
        dataset_train_split=options.split,
        prompt_column=options.prompt_column or "prompt",
        answer_column=options.answer_column,
        tests_column=options.tests_column,
    )
    try:
        try:
            dataset = load_train_dataset(script)
        except TrainError as error:
            if options.prompt_column is not None or "prompt_column" not in str(error):
                raise
            script.prompt_template = ""  # no prompt column: empty prompts (rewards rarely read them)
            dataset = load_train_dataset(script)
    except TrainError as error:
        raise CheckError(str(error)) from None
    except (FileNotFoundError, ValueError, ConnectionError) as error:
        raise CheckError(f"cannot load dataset {options.dataset!r}: {error}") from None
    columns = dataset.column_names
    if options.tests_column:
        gold = "tests"
    elif options.answer_column:
        gold = "answer"
    else:
        gold = next((c for c in ("answer", "solution", "tests") if c in columns), None)
    if gold is None:
        raise CheckError(
            "no gold column (answer, solution or tests) in the dataset; give --answer-column (math) or "
            f"--tests-column (code); columns: {sorted(columns)}"
        )
    if options.solution_column is not None and options.solution_column not in columns:
        raise CheckError(f"--solution-column {options.solution_column!r} is not a column; columns: {sorted(columns)}")
    rows = [row for row in dataset.select(range(min(len(dataset), 10 * options.rows))) if row[gold] not in (None, "")]
    if not rows:
        raise CheckError(f"column {gold!r} has no non-empty gold in the first {10 * options.rows} rows")
    return rows[: options.rows], gold, "prompt"


def main(argv: list[str] | None = None, prog: str = "trl-dapo check-reward") -> int:
    """Run `trl-dapo check-reward`; 0 clean, 1 a false positive, 2 bad input (one line on stderr)."""
    from trl_dapo_ext.cli.errors import report_error

    options = _parser(prog).parse_args(argv)
    try:
        return run(options)
    except CheckError as error:
        return report_error(prog, error, options.debug)


def run(options) -> int:
    if not options.timeout > 0:
        raise CheckError(f"--timeout must be positive, got {options.timeout}")
    reward = resolve_reward(options.reward)
    if not callable(reward):
        raise CheckError(f"{options.reward} is a {type(reward).__name__}, not a function")
    if (options.dataset is None) == (options.completions is None):
        raise CheckError("give --dataset (the battery from its golds) or --completions (labelled completions)")
    if options.completions is not None:
        rows, cases, gold, prompt_column = load_labelled(options)
        kind, source = "labelled", options.completions
    else:
        rows, gold, prompt_column = load_rows(options)
        (kind, cases), source = _battery(options, rows, gold), options.dataset
    _check_columns(reward, [column for column in rows[0] if column != prompt_column])
    fmt = options.completion_format
    chat = isinstance(rows[0].get(prompt_column), list) if fmt == "auto" else fmt == "chat"
    name = getattr(reward, "__name__", options.reward)
    print(
        f"check-reward: {name} on {len(cases)} {kind} completions from {len(rows)} golds of {source} "
        f"(column {gold!r}, {'chat' if chat else 'text'} completions, {options.timeout:g} s per call)",
        file=sys.stderr,
    )

    def progress(done: int, total: int) -> None:
        if done % 100 == 0 or done == total:
            print(f"  {done}/{total}", file=sys.stderr)

    results = run_cases(
        reward, cases, rows, chat=chat, prompt_column=prompt_column, timeout_s=options.timeout, progress=progress
    )
    verdict = _print_results(results, options.threshold)
    if options.json:
        _write_json(Path(options.json), results)
    return 1 if verdict else 0


def _check_columns(reward, columns: list[str]) -> None:
    """Before the battery: a library reward (`math_reward`, `code_reward`, ...) finds the column it grades against.

    Without it every call would raise the same `MissingColumnError`; this says so once, naming the missing column and
    the columns the reward would get (the prompt goes to ``prompts``, not as a column), as `trl-dapo train` does.
    """
    from trl_dapo_ext.cli.train import TrainError, check_reward_columns

    try:
        check_reward_columns([reward], columns)
    except TrainError as error:
        raise CheckError(str(error)) from None


def load_labelled(options) -> tuple[list[dict], list, str, str]:
    """``--completions``: (rows of ``prompt`` and ``answer`` for the reward, their cases, "answer", "prompt").

    The gold column (``--answer-column``, else ``answer`` or ``solution``) is passed as ``answer``, as ``trl-dapo
    train`` renames it; ``--prompt-column`` (default ``prompt``, else ``question``) as ``prompts``.
    """
    path = Path(options.completions)
    if not path.is_file() or path.suffix != ".jsonl":
        raise CheckError(f"--completions {path}: expected an existing .jsonl file")
    try:
        raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise CheckError(f"--completions {path}: not JSON lines ({error})") from None
    if not raw:
        raise CheckError(f"--completions {path} is empty")
    gold = options.answer_column or next((c for c in ("answer", "solution") if c in raw[0]), None)
    missing = sorted({"completion", "label", gold or "answer"} - set(raw[0]))
    if missing:
        raise CheckError(f"--completions {path}: rows lack {missing}; columns: {sorted(raw[0])}")
    prompt = options.prompt_column or ("prompt" if "prompt" in raw[0] else "question")
    try:
        cases = labelled_cases(raw)
    except ValueError as error:
        raise CheckError(f"--completions {path}: {error}") from None
    rows = [{"prompt": row.get(prompt), "answer": row[gold]} for row in raw]
    return rows, cases, "answer", "prompt"


def _battery(options, rows: list[dict], gold: str) -> tuple[str, list]:
    """("math" | "code", the battery's cases) for ``--kind`` (auto: code when the reward or the gold column says so)."""
    kind = options.kind
    if kind == "auto":
        kind = "code" if options.tests_column or "code" in options.reward.lower() or gold == "tests" else "math"
    if kind == "code":
        solutions = [row[options.solution_column] for row in rows] if options.solution_column else None
        return kind, code_cases([row[gold] for row in rows], solutions)
    return kind, math_cases([row[gold] for row in rows])


def _print_results(results, threshold: float) -> bool:
    """Print the table, the categories, the findings and the verdict line; True when the reward failed."""
    table = summarize(results, threshold)
    print(format_table(table))
    print()
    for name_, description in CATEGORIES.items():
        if name_ in table:
            print(f"  {name_}: {description}")
    print()
    lines = findings(results, threshold)
    for line in lines:
        print(line)
    verdict = failed(table)
    gating = sum(row.false_positives for key, row in table.items() if key not in NOT_GATING)
    print(
        f"\nverdict: {'FAIL' if verdict else 'pass'}: {gating} false positive(s) in gating categories, "
        f"{sum(r.timed_out for r in results)} timeout(s), {sum(r.error is not None for r in results)} exception(s)"
    )
    return verdict


def _write_json(path: Path, results) -> None:
    """Every result as a JSON record (``--json``), completions cut at 500 characters."""
    records = [
        dict(
            category=r.case.category,
            name=r.case.name,
            row=r.case.row,
            should_pass=r.case.should_pass,
            completion=r.case.completion[:500],
            score=r.score,
            error=r.error,
            timed_out=r.timed_out,
            ms=round(r.ms, 3),
        )
        for r in results
    ]
    path.write_text(json.dumps(records, indent=1, ensure_ascii=True))


if __name__ == "__main__":
    sys.exit(main())
