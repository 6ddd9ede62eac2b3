"""Figures the README quotes equal their one source: the docs page that holds the measurement and names the command
that made it. A README figure that drifts from its page fails here; update the page (rerun its command), then the
README."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _paragraph(text: str, start: str) -> str:
    """The paragraph of `text` that begins with `start`, on one line."""
    index = text.index(start)
    return text[index : text.find("\n\n", index)].replace("\n", " ")


def _table_rows(page: str, header_start: str) -> list[list[str]]:
    """The body cells of the Markdown table whose header line begins with `header_start`."""
    lines = page[page.index(header_start) :].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.strip().startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def test_math_reward_speed_ups_are_the_math_grading_pages():
    page = (ROOT / "docs" / "math-grading.md").read_text()
    rows = _table_rows(page, "  | corpus | G | `math_reward` |")
    assert [(row[0].split()[0], row[1]) for row in rows] == [("mixed", "8"), ("mixed", "1"), ("symbolic", "8"),
                                                             ("symbolic", "1")]  # fmt: skip
    speed_ups = [row[4].split()[0] for row in rows]  # "7.2x (7.2–9.8x)" -> "7.2x"
    cpu_ratios = [float(trl) / float(ours) for ours, trl in (row[5].split(" / ") for row in rows)]
    cpu_range = [f"{min(cpu_ratios):.1f}x", f"{max(cpu_ratios):.1f}x"]

    readme = _paragraph(README, "`math_reward` is ")
    assert "docs/math-grading.md#speed" in readme
    assert re.findall(r"\d+(?:\.\d+)?x", readme) == speed_ups + cpu_range, readme
    assert f"{cpu_range[0]} to {cpu_range[1]} less CPU" in page.replace("\n  ", " ")


def test_code_sandbox_run_time_is_the_code_sandbox_pages():
    page = (ROOT / "docs" / "code-sandbox.md").read_text()
    section = page[page.index("## Performance") :]
    assert "python benchmarks/code_rewards.py" in section  # the page names the command
    row = next(r for r in _table_rows(section, "| measure | result |") if r[0].startswith("one sandboxed run"))
    median_ms = row[1].split(" / ")[0]  # "148 ms / 159 ms": median / mean
    readme = _paragraph(README, "`math_reward` is ")
    assert re.findall(r"\d+(?:-\d+)? ms", readme) == [median_ms], readme
    assert "docs/code-sandbox.md#performance" in readme


def test_speed_up_columns_print_slowdowns_as_such():
    spec = importlib.util.spec_from_file_location("planner_scaling", ROOT / "benchmarks" / "planner_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert [module.ratio(r) for r in (0.28, 1.0, 6.94, 24.3, 199.2)] == ["0.3x", "1.0x", "6.9x", "24x", "199x"]
    page = (ROOT / "docs" / "dynamic-sampling.md").read_text()
    assert not re.search(r"\|\s*0x\s*\|", page), "a 0x speed-up in docs/dynamic-sampling.md: print it with ratio()"


def test_one_size_for_the_t4():
    """NVIDIA's T4 has 16 GB; nvidia-smi shows 15 GiB, which the memory verdicts use."""
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "notebooks").glob("*.ipynb")]
    wrong = [str(p.relative_to(ROOT)) for p in texts if re.search(r"T4 \(?15 ?GB\b|\b15 ?GB\)? T4", p.read_text())]
    assert not wrong, f"a 15 GB T4 in {wrong}: it has 16 GB (15 GiB)"


def _ablation_cells(table: str, arm: int, column: int) -> str:
    """The cell of ``arm``'s row in a results.md "After the budget" table (0: the arm's name column)."""
    row = next(r for r in _table_rows(table, "| arm | runs |") if r[0].split()[0] == str(arm))
    return row[column].replace(" (n=5)", "")


def test_the_ablation_page_quotes_each_results_table_whole():
    """docs/ablation.md carries each results.md verbatim (the site leaves the raw tables out: mkdocs.yml)."""
    page = (ROOT / "docs" / "ablation.md").read_text()
    for task in ("mixed", "demo"):
        table = (ROOT / "docs" / "ablation_results" / task / "results.md").read_text().strip()
        assert table in page, f"docs/ablation.md does not quote docs/ablation_results/{task}/results.md whole"


def test_the_results_tables_are_what_the_records_give():
    """docs/ablation_results/*/results.md, remade from the records beside them by benchmarks/ablation.py's own code
    (the intervals, the corrected comparisons, the equal-time tables)."""
    import json

    from helpers import load_benchmark

    ablation = load_benchmark("ablation")
    for task in ("mixed", "demo"):
        folder = ROOT / "docs" / "ablation_results" / task
        records = json.loads((folder / "results.json").read_text())
        assert (folder / "results.md").read_text() == ablation.summary_table(records), f"{task}: stale results.md"


def _row(table: str, header_start: str, arm: int) -> list[str]:
    return next(r for r in _table_rows(table, header_start) if r[0].split()[0] == str(arm))


def test_the_screening_headline_stands_beside_its_corrections():
    """Wherever a page quotes screening's gain over GRPO on the mixed task, it also gives Holm's p over the selection
    arms, the Bonferroni interval, the comparison with arm 3 (GRPO with DAPO's loss: dynamic sampling off) and the
    figure at equal CPU time with its generation rounds per step; none of it in bold, and no "safe choice"."""
    mixed = (ROOT / "docs" / "ablation_results" / "mixed" / "results.md").read_text()
    headline = _ablation_cells(mixed, 9, 9)
    corrected = _row(mixed, "| arm | after - arm 1 | p | Holm p |", 9)
    holm_p, bonferroni = f"p = {corrected[3]}", corrected[4]
    against_arm_3 = _ablation_cells(mixed, 9, 10)
    at_equal_cpu = mixed[mixed.index("**At equal CPU time**") :]
    equal_cpu = _row(at_equal_cpu, "| arm | CPU s compared", 9)[4].replace(" (n=5)", "")
    rounds = f"{float(_row(mixed, '| arm | completions per informative group |', 9)[2]):.1f}"
    assert (headline, holm_p, bonferroni) == ("+2.1 [+0.7, +3.5]", "p = 0.09", "[-0.4, +4.6]")  # the scan's anchor
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    quoting = {}
    for path in pages:
        text = path.read_text().replace("\n", " ")
        assert "safe choice" not in text, path.name
        if headline in text:
            quoting[path.name] = [f for f in (holm_p, bonferroni, against_arm_3, equal_cpu, rounds) if f not in text]
            assert f"**{headline}**" not in text and f"{headline}**" not in text, f"{path.name}: the headline in bold"
    assert "ablation.md" in quoting, sorted(quoting)  # the README and choosing.md now quote the study instead
    assert not any(quoting.values()), {page: missing for page, missing in quoting.items() if missing}


def test_the_check_reward_results_count_their_tables_rows():
    """docs/preflight.md's "N completions" for each verifier is the sum of its table's cases."""
    page = (ROOT / "docs" / "preflight.md").read_text()
    section = page[page.index("### Results: TRL's `accuracy_reward`") :]
    section = section[: section.index("\n## ", 1) if "\n## " in section[1:] else len(section)]
    sums = []
    rest = section
    while "| category | cases |" in rest:
        sums.append(sum(int(row[1]) for row in _table_rows(rest, "| category | cases |")))
        rest = rest[rest.index("| category | cases |") + 1 :]
    stated = [int(n) for n in re.findall(r"[;,] (\d+) completions", section)]
    assert len(sums) == 2 and stated and set(stated) == set(sums), (stated, sums)
