"""benchmarks/README.md and benchmarks/RESULTS.md: the two tables a newcomer starts from stay whole.

README.md opens with one row per benchmark script (what it measures, its latest figure and date);
RESULTS.md opens with "Current figures", one row per script linking the dated journal entry the
figure comes from. A script added without its rows, a row whose section or entry was renamed, or
the two tables disagreeing on a figure fails here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO_ROOT / "benchmarks"
README = BENCHMARKS / "README.md"
RESULTS = BENCHMARKS / "RESULTS.md"
HELPERS = frozenset({"common"})  # shared code of the scripts, not a benchmark
NOT_RECORDED = "not recorded"
_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]*)\)")
_SCRIPT = re.compile(r"^\[`(\w+)\.py`\]\(([^)]*)\)$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Row:
    """One table row: the script it names, the link on its name and the other cells as written."""

    script: str
    link: str
    cells: tuple[str, ...]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path: Path) -> list[str]:
    """The text of every heading of a markdown file, in order (fenced code skipped)."""
    found, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"^#{1,6} (.+)$", line)):
            found.append(match.group(1))
    return found


def anchors(path: Path) -> dict[str, str]:
    """Anchor -> heading for a markdown file; repeated headings get GitHub's -1, -2 suffixes."""
    result: dict[str, str] = {}
    for heading in headings(path):
        base = key = anchor(heading)
        n = 0
        while key in result:
            n += 1
            key = f"{base}-{n}"
        result[key] = heading
    return result


def first_table(lines: list[str], where: str) -> list[Row]:
    """The rows of the first table in lines (header and rule dropped), each naming a script."""
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    assert start is not None, f"{where}: no table"
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = tuple(cell.strip() for cell in line.strip().strip("|").split(" | "))
        match = _SCRIPT.match(cells[0])
        assert match, f"{where}: first cell {cells[0]!r} is not [`<script>.py`](link)"
        rows.append(Row(match.group(1), match.group(2), cells[1:]))
    return rows


def readme_rows() -> list[Row]:
    """README.md's opening table: script, what it measures, latest figure, date."""
    lines = README.read_text(encoding="utf-8").splitlines()
    first_section = next(i for i, line in enumerate(lines) if line.startswith("## "))
    return first_table(lines[:first_section], "benchmarks/README.md before its first section")


def current_rows() -> list[Row]:
    """RESULTS.md's "Current figures" table: script, figure, date, entry."""
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    assert "## Current figures" in lines, "benchmarks/RESULTS.md: no '## Current figures' section"
    start = lines.index("## Current figures") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return first_table(lines[start:end], "benchmarks/RESULTS.md, Current figures")


def resolve(link: str, source: Path) -> tuple[Path, str]:
    """A link's target file and anchor ('' when it names a whole file), relative to source."""
    target, _, fragment = link.partition("#")
    return (source.parent / target).resolve() if target else source, fragment


def scripts() -> set[str]:
    return {path.stem for path in BENCHMARKS.glob("*.py")} - HELPERS


def _rows_by_script(rows: list[Row], where: str) -> dict[str, Row]:
    names = [row.script for row in rows]
    repeated = sorted({name for name in names if names.count(name) > 1})
    assert not repeated, f"{where}: scripts with more than one row: {repeated}"
    return {row.script: row for row in rows}


def test_every_script_has_a_row_in_both_tables():
    expected = scripts()
    assert expected, "no benchmark scripts found"
    for where, rows in (("README.md", readme_rows()), ("RESULTS.md Current figures", current_rows())):
        found = set(_rows_by_script(rows, where))
        assert found == expected, (
            f"benchmarks/{where}: rows missing for {sorted(expected - found)}, "
            f"rows for no script {sorted(found - expected)}"
        )


@pytest.mark.parametrize("source, rows", [(README, readme_rows), (RESULTS, current_rows)],
                         ids=["README", "RESULTS"])
def test_every_link_in_the_tables_points_at_a_heading(source, rows):
    for row in rows():
        for link in (row.link, *(link for text in row.cells for _, link in _LINK.findall(text))):
            if re.match(r"^[a-z]+://", link):
                continue
            target, fragment = resolve(link, source)
            assert target.is_file(), f"{source.name}, row {row.script}: {link} names no file"
            if fragment:
                assert fragment in anchors(target), (
                    f"{source.name}, row {row.script}: {link} names no heading of {target.name}")


def test_each_script_links_its_own_section():
    """A README row links the README section of that script; a RESULTS row links the same one."""
    sections = anchors(README)
    current = _rows_by_script(current_rows(), "RESULTS.md")
    for row in readme_rows():
        target, fragment = resolve(row.link, README)
        assert target == README and fragment in sections, f"README row {row.script}: {row.link}"
        assert f"`{row.script}.py`" in sections[fragment], (
            f"README row {row.script} links the section {sections[fragment]!r}")
        assert resolve(current[row.script].link, RESULTS) == (README, fragment), (
            f"RESULTS row {row.script} links {current[row.script].link}, README's {row.link}")


def test_current_figures_come_from_the_entries_they_link():
    """Each dated figure links a dated journal entry of that date; an unrecorded one has no date."""
    journal = anchors(RESULTS)
    for row in current_rows():
        figure, date, entry = row.cells
        if figure.startswith(NOT_RECORDED):
            assert date == "-", f"RESULTS row {row.script}: not recorded but dated {date}"
            continue
        assert _DATE.match(date), f"RESULTS row {row.script}: date {date!r} is not YYYY-MM-DD"
        links = _LINK.findall(entry)
        assert len(links) == 1, f"RESULTS row {row.script}: entry {entry!r} is not one link"
        target, fragment = resolve(links[0][1], RESULTS)
        assert target == RESULTS and fragment in journal, (
            f"RESULTS row {row.script}: {links[0][1]} is no entry of RESULTS.md")
        assert journal[fragment].startswith(date), (
            f"RESULTS row {row.script}: dated {date}, its entry is {journal[fragment]!r}")


def test_readme_and_results_quote_the_same_figures():
    current = _rows_by_script(current_rows(), "RESULTS.md")
    for row in readme_rows():
        _, figure, date = row.cells
        assert (figure, date) == current[row.script].cells[:2], (
            f"{row.script}: README says {figure!r} ({date}), "
            f"RESULTS.md says {current[row.script].cells[0]!r} ({current[row.script].cells[1]})")


def test_current_figures_open_the_journal():
    titles = [heading for heading in headings(RESULTS) if heading.startswith("20")]
    assert titles, "RESULTS.md: no dated entries"
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    assert lines.index("## Current figures") < lines.index(f"## {titles[0]}"), (
        "RESULTS.md: 'Current figures' must come before the first dated entry")
