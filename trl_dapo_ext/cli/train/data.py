"""The training data: the split from the hub, a dataset folder or a data file, then the `prompt` column and the
`answer` / `tests` columns the library rewards read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .arguments import TrainError, TrainScriptArguments

DATA_FILE_TYPES = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def looks_local(name: str) -> bool:
    """Whether ``name`` is meant as a local path, not a Hub id (``org/name``): it starts with ``.``, ``/`` or ``~``,
    ends like a data file, or has more than one ``/``. A missing local path is then reported at once, instead of
    after the Hub's retries.

    >>> [looks_local(n) for n in ("openai/gsm8k", "nofile.jsonl", "runs/demo/final", "./m", "gpt2")]
    [False, True, True, True, False]
    """
    return name.startswith((".", "/", "~")) or Path(name).suffix.lower() in DATA_FILE_TYPES or name.count("/") > 1


def check_local_path(name: str, what: str) -> None:
    """A :class:`TrainError` when ``name`` looks local (:func:`looks_local`) and does not exist; for the demo's
    model folder, which command writes it."""
    if looks_local(name) and not Path(name).expanduser().exists():
        made_by = " (trl-dapo demo writes it: run trl-dapo demo --quick first)" if name.endswith("demo/final") else ""
        raise TrainError(f"{what} {name} does not exist{made_by}")


def check_data_file(path: Path) -> None:
    """One line for a data file the loader would fail on with a traceback: empty, or a JSON-lines row that is not
    JSON (with its line number)."""
    if not path.read_bytes().strip():
        raise TrainError(f"{path} is empty: a data file needs at least one row")
    if path.suffix.lower() != ".jsonl":
        return
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise TrainError(f"{path} line {number}: not valid JSON ({error.msg}, column {error.colno})") from None
            if not isinstance(row, dict):
                raise TrainError(f"{path} line {number}: a row must be a JSON object, got {type(row).__name__}")


def load_train_dataset(script_args: TrainScriptArguments):
    """The training split as a `datasets.Dataset`, from the hub, a local dataset folder or a data file.

    `dataset_name` may be a hub id (`openai/gsm8k`), a folder written by `Dataset.save_to_disk`, a folder of data
    files, or one `.json` / `.jsonl` / `.csv` / `.parquet` file (its rows are the training split).
    """
    from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

    name = script_args.dataset_name
    if not name:
        raise TrainError("dataset_name is required (a hub id, a local folder or a .json/.jsonl/.csv/.parquet file)")
    if script_args.dataset_streaming:
        raise TrainError("dataset_streaming is not supported: dynamic sampling needs a map-style dataset")
    check_local_path(name, "dataset_name")
    path = Path(name).expanduser()
    split = script_args.dataset_train_split
    if path.is_file():
        kind = DATA_FILE_TYPES.get(path.suffix.lower())
        if kind is None:
            raise TrainError(f"{path}: unsupported file type; use one of {', '.join(DATA_FILE_TYPES)}")
        try:
            dataset = load_dataset(kind, data_files=str(path), split="train")
        except Exception as error:  # noqa: BLE001 - the datasets library's errors say little; name the file
            check_data_file(path)  # an empty file or the first bad line, read only once the loader has failed
            cause = error.__cause__ or error
            raise TrainError(f"cannot read {path}: {type(cause).__name__}: {cause}") from error
        if len(dataset) == 0:
            check_data_file(path)
    elif path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file()):
        dataset = load_from_disk(str(path))
        if isinstance(dataset, DatasetDict):
            dataset = dataset[split]
    else:
        dataset = load_dataset(name, name=script_args.dataset_config, split=split)
    if not isinstance(dataset, Dataset):
        raise TrainError(f"expected a map-style dataset, got {type(dataset).__name__}")
    if len(dataset) == 0:
        raise TrainError(f"dataset {name} has no rows")
    if script_args.max_train_samples is not None:
        dataset = dataset.select(range(min(script_args.max_train_samples, len(dataset))))
    return prepare_dataset(dataset, script_args)


def _format_value(value: Any) -> str:
    return "\n".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)


def prepare_dataset(dataset, script_args: TrainScriptArguments):
    """Add the `prompt` column (chat messages or plain text) and rename the answer/tests columns.

    >>> from datasets import Dataset
    >>> args = TrainScriptArguments(prompt_column="question", answer_column="gold", system_prompt="Be brief.")
    >>> row = prepare_dataset(Dataset.from_list([{"question": "1+1?", "gold": "2"}]), args)[0]
    >>> row["prompt"], row["answer"]
    ([{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '1+1?'}], '2')
    """
    columns = set(dataset.column_names)
    template = script_args.prompt_template
    if template is None and script_args.prompt_column not in columns:
        raise TrainError(
            f"prompt_column {script_args.prompt_column!r} is not a dataset column; columns: {sorted(columns)}"
        )
    for option in ("answer_column", "tests_column"):
        column = getattr(script_args, option)
        if column is not None and column not in columns:
            raise TrainError(f"{option} {column!r} is not a dataset column; columns: {sorted(columns)}")

    def to_prompt(row: dict) -> dict:
        if template is not None:
            try:
                text = template.format_map({key: _format_value(value) for key, value in row.items()})
            except KeyError as error:
                raise TrainError(f"prompt_template names {error}, which is not a column") from None
        else:
            text = _format_value(row[script_args.prompt_column])
        if script_args.use_chat_template:
            messages = [{"role": "system", "content": script_args.system_prompt}] if script_args.system_prompt else []
            return {"prompt": messages + [{"role": "user", "content": text}]}
        return {"prompt": f"{script_args.system_prompt}\n\n{text}" if script_args.system_prompt else text}

    # Drop an existing text `prompt` column first: a chat-format prompt cannot overwrite a string column in place.
    dataset = dataset.map(to_prompt, remove_columns=["prompt"] if "prompt" in columns else None)
    for column, target in ((script_args.answer_column, "answer"), (script_args.tests_column, "tests")):
        if column is not None and column != target:
            if target in dataset.column_names:
                dataset = dataset.remove_columns(target)
            dataset = dataset.rename_column(column, target)
    return dataset
