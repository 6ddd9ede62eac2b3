"""`trl-dapo check-reward`: the battery flags weak rewards (substring match, TRL's accuracy_reward, an exit-code
test harness), passes the library's rewards apart from the verifier holes listed below, and reports timeouts and
exceptions by their verdict; bad input exits with status 2 and one line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from trl_dapo_ext.cli import check_reward
from trl_dapo_ext.cli import main as cli_main
from trl_dapo_ext.preflight.battery import CATEGORIES, code_cases, gold_text, math_cases, parse_number, wrong_answers
from trl_dapo_ext.preflight.reward_check import call_with_timeout, failed, findings, run_cases, summarize

GOLDS = ["42", "\\frac{1}{2}", "-3", "1,000", "3.5", "She had 3 + 4 = 7.\n#### 7", "x+1", "\\frac{x}{2}"]

KNOWN_MATH_REWARD_HOLES: set[tuple[str, str]] = set()  # none left: a new false positive fails the test below


def _substring(completions, answer, **kwargs):
    """The deliberately weak reward: 1.0 when the gold appears anywhere in the completion."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(str(a) in t) for t, a in zip(texts, answer)]


def _quick(cases):
    """The battery without the slow repeats: a power tower costs a verifier its full time limit, once is enough."""
    return [c for c in cases if c.name != "power tower" or c.row == 0]


def _rows(golds):
    return [{"prompt": "Solve.", "answer": g, "solution": g} for g in golds]


def _false_positive_names(results):
    return {(r.case.category, r.case.name) for r in results if not r.case.should_pass and (r.score or 0) >= 0.5}


def test_battery_covers_every_category_and_the_near_misses_are_wrong():
    cases = math_cases(GOLDS)
    # code_cheat is the code battery's; model_right / model_wrong hold labelled completions (--completions)
    assert {c.category for c in cases} == set(CATEGORIES) - {"code_cheat", "model_right", "model_wrong"}
    assert all(c.category == "correct" for c in cases if c.should_pass)
    assert gold_text(GOLDS[5]) == "7"
    for gold in ("42", "-3", "3.5", "\\frac{1}{2}", "1,000", "0"):
        for name, answer in wrong_answers(gold):
            assert parse_number(answer.split(" ")[0]) != parse_number(gold) or "thousand" in answer, (gold, name)
    names = {c.name for c in math_cases(["42"]) if c.category == "near_miss"}
    assert {"off by one (+1)", "off by one (-1)", "sign flipped", "digits swapped"} <= names
    assert {c.category for c in code_cases(["assert f(1) == 2"], ["def f(x):\n    return x + 1"])} == {
        "correct",
        "code_cheat",
        "degenerate",
        "injection",
    }


def test_weak_substring_reward_is_flagged():
    results = run_cases(_substring, math_cases(GOLDS), _rows(GOLDS), chat=True)
    table = summarize(results)
    assert failed(table)
    for category in ("hedge", "mentioned", "unfinished"):
        assert table[category].false_positives > 0, category
    assert any(line.startswith("DANGER: false positive, hedge") for line in findings(results))


def test_library_math_reward_has_no_false_positive_beyond_the_known_holes():
    from reward_funcs import math_reward

    # A generous limit: a timeout here would be a hang, not a slow machine (the verifier has its own 5 s limit).
    results = run_cases(math_reward, _quick(math_cases(GOLDS)), _rows(GOLDS), chat=True, timeout_s=300)
    table = summarize(results)
    assert _false_positive_names(results) - {(c, n) for c, n in KNOWN_MATH_REWARD_HOLES} <= {
        ("units", "wrong unit"),
        ("units", "percent sign"),  # documented policy: units and % are dropped (not gating)
    }
    assert table["correct"].passed == table["correct"].cases  # every gold format is accepted
    assert sum(row.exceptions + row.timeouts for row in table.values()) == 0


def test_format_rewards_pay_nothing_in_the_format_only_category():
    import dataclasses

    from reward_funcs import math_answer_format_reward, math_format_reward

    # A lone variable in a box could be a value, so format rewards pay for it; every other case has no answer.
    cases = [c for c in math_cases(GOLDS[:2]) if c.category == "format_only" and c.name != "variable in box"]
    names = {c.name for c in cases}
    assert {
        "placeholder \\boxed{number}",
        "placeholder Answer: line",
        "placeholder <answer> tag",
        "ellipsis in box",
    } <= names
    thought = [dataclasses.replace(c, completion=f"<think>Work.</think>\n{c.completion}") for c in cases]
    for reward, battery in ((math_answer_format_reward, cases), (math_format_reward, thought)):
        table = summarize(run_cases(reward, battery, _rows(GOLDS[:2]), chat=True), threshold=0.01)
        assert table["format_only"].false_positives == 0, reward.__name__


def test_trl_accuracy_reward_false_positives_are_found():
    pytest.importorskip("math_verify")
    from trl.rewards import accuracy_reward

    golds = GOLDS[:3]
    results = run_cases(accuracy_reward, _quick(math_cases(golds)), _rows(golds), chat=True, timeout_s=300)
    found = _false_positive_names(results)
    # TRL reads the last of several boxes in separate math environments, and reads reasoning that never closed.
    assert {("hedge", "two boxes, space"), ("hedge", "boxes, newline"), ("unfinished", "unclosed <think>")} <= found
    assert failed(summarize(results))


def test_timeouts_and_exceptions_are_verdicts_not_hangs():
    import time

    def fragile(completions, answer, **kwargs):
        text = completions[0]
        if len(text) > 10_000:
            time.sleep(60)  # a reward that hangs on huge inputs
        if not text:
            raise ValueError("empty completion")
        return [0.0]

    cases = [c for c in math_cases(["42"]) if c.category == "degenerate"]
    table = summarize(run_cases(fragile, cases, _rows(["42"]), chat=False, timeout_s=0.5))["degenerate"]
    assert table.timeouts == 2  # huge text, huge number
    assert table.exceptions == 1  # empty
    with pytest.raises(TimeoutError):
        call_with_timeout(lambda: time.sleep(30), 0.2)


def test_code_battery_catches_an_exit_code_harness_and_passes_the_sandbox(tmp_path):
    import subprocess
    import sys

    from reward_funcs import code_reward, extract_code

    def exit_code_harness(completions, tests, **kwargs):
        """A weak judge: run the program followed by the asserts, pass when the exit status is 0."""
        out = []
        for completion, test in zip(completions, tests):
            code = extract_code(completion)
            if code is None:
                out.append(0.0)
                continue
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", code + "\n" + test], capture_output=True, timeout=5, cwd=tmp_path
                )
                out.append(float(proc.returncode == 0))
            except subprocess.TimeoutExpired:
                out.append(0.0)
        return out

    tests = ["assert add(1, 2) == 3\nassert add(0, 0) == 0"]
    rows = [{"prompt": "Write add.", "tests": tests[0]}]
    cases = code_cases(tests, ["def add(a, b):\n    return a + b"])
    cases = [c for c in cases if c.name not in ("huge program", "infinite loop")]  # keep the test short
    weak = _false_positive_names(run_cases(exit_code_harness, cases, rows, chat=False))
    assert {
        ("code_cheat", "sys.exit(0)"),
        ("code_cheat", "os._exit(0)"),
        ("code_cheat", "always-equal object"),
    } <= weak
    sandbox = summarize(run_cases(code_reward, cases, rows, chat=False))
    assert not failed(sandbox) and sandbox["correct"].passed == 1


def _write_dataset(tmp_path, golds, column="answer"):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"prompt": "Solve.", column: g}) + "\n" for g in golds))
    return path


def test_cli_exit_status_gates_and_json(tmp_path, monkeypatch, capsys):
    (tmp_path / "weak_rewards.py").write_text(
        textwrap.dedent(
            """
            def substring(completions, answer, **kwargs):
                return [float(str(a) in c[-1]["content"]) for c, a in zip(completions, answer)]

            def strict(completions, answer, **kwargs):
                return [float(c[-1]["content"] == f"The answer is $\\\\boxed{{{a}}}$.") for c, a in zip(completions, answer)]
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    data = _write_dataset(tmp_path, ["42", "17"])
    assert cli_main.main(["check-reward", "weak_rewards:substring", "--dataset", str(data)]) == 1
    out = capsys.readouterr().out
    assert "| hedge |" in out and "DANGER: false positive" in out and "verdict: FAIL" in out
    report = tmp_path / "verdicts.json"
    rc = check_reward.main(["weak_rewards.strict", "--dataset", str(data), "--json", str(report)])
    assert rc == 0 and "verdict: pass" in capsys.readouterr().out
    records = json.loads(report.read_text())
    assert {r["category"] for r in records} >= {"correct", "hedge"} and all("score" in r for r in records)
    # --answer-column renames the gold column to `answer`, as trl-dapo train does.
    renamed = tmp_path / "gold.jsonl"
    renamed.write_text(json.dumps({"prompt": "Solve.", "gold": "42"}) + "\n")
    assert check_reward.main(["weak_rewards:strict", "--dataset", str(renamed), "--answer-column", "gold"]) == 0
    captured = capsys.readouterr()
    assert "(column 'answer'" in captured.err and "correct / boxed" not in captured.out  # the boxed gold passed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["no_such_reward", "--dataset", "{data}"], "unknown reward function 'no_such_reward'"),
        (
            ["math_reward", "--dataset", "{data}", "--answer-column", "gold"],
            "answer_column 'gold' is not a dataset column",
        ),
        (["math_reward", "--dataset", "/no/such/file.jsonl"], "does not exist"),
        (["math_reward", "--dataset", "{data}", "--rows", "0"], "--rows must be >= 1"),
        (["math_reward", "--dataset", "{data}", "--timeout", "0"], "--timeout must be positive"),
        (["nomodule_xyz:f", "--dataset", "{data}"], "cannot import reward function"),
        (["math_reward"], "give --dataset (the battery from its golds) or --completions"),
        (["math_reward", "--dataset", "{data}", "--completions", "{data}"], "give --dataset"),
        (["math_reward", "--completions", "{data}"], "rows lack ['completion', 'label']"),
    ],
)
def test_cli_bad_input_is_one_line_and_status_2(tmp_path, capsys, argv, message):
    data = _write_dataset(tmp_path, ["42"])
    assert check_reward.main([a.replace("{data}", str(data)) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("trl-dapo check-reward: error:") and message in err[-1]


CRASHING_REWARDS = """
def boom(completions, **kwargs):
    raise ValueError("kaboom")

def two_for_one(completions, **kwargs):
    return [1.0, 1.0]

def words(completions, **kwargs):
    return ["good"]
"""


@pytest.mark.parametrize(
    ("reward", "first"),
    [
        ("boom", "ValueError: kaboom"),
        ("two_for_one", "returned 2 rewards for 1 completion"),
        ("words", "returned 'good' (str)"),
    ],
)
def test_a_reward_that_would_crash_training_fails_the_check(tmp_path, monkeypatch, capsys, reward, first):
    # Every call raises (or returns what TRL cannot turn into a reward tensor): no false positive can be found, but a
    # training step would crash, so the verdict is FAIL (status 1) and the exception is named once.
    (tmp_path / "crashing.py").write_text(CRASHING_REWARDS)
    monkeypatch.chdir(tmp_path)
    data = _write_dataset(tmp_path, ["42", "17"])
    assert check_reward.main([f"crashing:{reward}", "--dataset", str(data)]) == 1
    out = capsys.readouterr().out
    crash_lines = [line for line in out.splitlines() if "raise" in line and line.startswith("DANGER")]
    assert len(crash_lines) == 1 and first in crash_lines[0], out[-2000:]
    assert "verdict: FAIL" in out


def test_a_library_reward_without_its_column_is_bad_input_before_the_battery(tmp_path, capsys):
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(3)))
    assert check_reward.main(["code_reward", "--dataset", str(data)]) == 2
    captured = capsys.readouterr()
    (line,) = [line for line in captured.err.splitlines() if "check-reward" in line]  # the battery never started
    assert line.startswith("trl-dapo check-reward: error: code_reward needs the unit tests") and "'tests'" in line
    assert "columns present: ['answer', 'question']" in line  # the file's columns only, no synthesised prompt
    assert "verdict" not in captured.out


def test_help_lists_the_three_preflight_commands(capsys):
    with pytest.raises(SystemExit):
        cli_main.main(["--help"])
    out = capsys.readouterr().out
    assert "check-reward" in out and "profile" in out and "estimate" in out
    commands = out[out.index("\ncommands:") :]  # the command table (argparse may wrap its usage list of names)
    rows = [line for line in commands.splitlines() if line.startswith("  ") and line.split()[0] in cli_main.COMMANDS]
    assert len(rows) == len(cli_main.COMMANDS), rows
    starts = {len(line) - len(line.split(maxsplit=1)[1]) for line in rows}
    assert len(starts) == 1, rows  # the descriptions start in one column
    with pytest.raises(SystemExit):
        check_reward.main(["--help"])
    assert "false positive" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------------------
# --completions: completions a model wrote, labelled by hand
# ---------------------------------------------------------------------------------------------------------------

SMOLLM2_COMPLETIONS = Path(__file__).parent / "data" / "smollm2_completions.jsonl"


def _write_labelled(tmp_path, rows):
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_labelled_completions_count_false_negatives_by_format_and_gate_on_false_positives(
    tmp_path, capsys, monkeypatch
):
    data = _write_labelled(
        tmp_path,
        [
            {"completion": "So the answer is $\\boxed{7}$.", "answer": "7", "label": "right", "format": "boxed"},
            {"completion": "3 + 4 = 7", "answer": "7", "label": "right", "format": "equals"},
            {"completion": "The total is \\boxed{8}.", "answer": "7", "label": "wrong", "format": "boxed"},
        ],
    )
    assert check_reward.main(["math_reward", "--completions", str(data)]) == 0
    out = capsys.readouterr().out
    assert "| model_right | 2 |" in out and "(passed 50%)" in out and "| model_wrong | 1 |" in out
    assert "false negative, model_right / equals: 1/1 scored low, e.g. '3 + 4 = 7'" in out
    assert "false negative, model_right / boxed" not in out and "verdict: pass" in out
    # A reward that pays for the gold anywhere rewards the wrong completion only if it mentions the gold: add one.
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    rows.append({"completion": "Not 7: the answer is \\boxed{9}.", "answer": "7", "label": "wrong", "format": "boxed"})
    (tmp_path / "weak.py").write_text(
        "def substring(completions, answer, **kwargs):\n"
        "    return [float(str(a) in c) for c, a in zip(completions, answer)]\n"
    )
    monkeypatch.chdir(tmp_path)  # modules in the working directory are importable, as for a user
    assert check_reward.main(["weak:substring", "--completions", str(_write_labelled(tmp_path, rows))]) == 1
    assert "DANGER: false positive, model_wrong / boxed: 1/2 rows rewarded" in capsys.readouterr().out


def test_smollm2_completions_have_no_false_positive_under_math_reward(capsys):
    """200 completions SmolLM2-135M-Instruct wrote (tests/data/make_smollm2_completions.py), labelled by hand: the
    library reward pays for no wrong one. Its false negatives per format are printed (docs/math-grading.md)."""
    rows = [json.loads(line) for line in SMOLLM2_COMPLETIONS.read_text().splitlines()]
    assert len(rows) == 200 and {row["label"] for row in rows} == {"right", "wrong"}
    assert check_reward.main(["math_reward", "--completions", str(SMOLLM2_COMPLETIONS)]) == 0
    assert "verdict: pass: 0 false positive(s)" in capsys.readouterr().out
