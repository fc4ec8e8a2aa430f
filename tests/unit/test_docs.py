"""The documentation's tables: none is cut by a blank line, the code layout table names every
part of the package, the README names every setting it lists correctly and every published
table. Each check is shown failing on a broken copy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.common.config import Settings
from jobs.common.tables import PUBLISHED_TABLES

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def cut_tables(text: str) -> list[int]:
    """Lines where a table resumes after a blank line with the same number of columns: a
    Markdown renderer shows the rest as a second table without a header, or as text."""
    lines = text.splitlines()
    found = []
    for i in range(2, len(lines)):
        before, blank, row = lines[i - 2], lines[i - 1], lines[i]
        if blank.strip() == "" and before.startswith("|") and row.startswith("|"):
            if before.count("|") == row.count("|") and not re.match(r"^\|[-| ]+\|$", row):
                found.append(i + 1)
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_table_is_cut_by_a_blank_line(doc):
    assert cut_tables(doc.read_text(encoding="utf-8")) == []


def test_a_cut_table_is_found():
    text = "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n"
    assert cut_tables(text) == [5]
    assert cut_tables("| a | b |\n|---|---|\n\ntext\n") == []


def layout_rows(text: str) -> str:
    start = text.index("## Code layout")
    return text[start : text.index("\n## ", start + 1)]


def unnamed_parts(layout: str) -> list[str]:
    """Folders and top-level modules of ``jobs`` that the layout table does not name."""
    jobs = ROOT / "jobs"
    packages = [p for p in jobs.iterdir() if (p / "__init__.py").exists()]
    parts = [f"jobs/{p.name}/" for p in packages]
    parts += [f"jobs/{p.name}" for p in jobs.glob("*.py") if p.name != "__init__.py"]
    modules = [p for p in jobs.rglob("*.py") if p.parent != jobs and p.name != "__init__.py"]
    missing = [p for p in parts if f"`{p}" not in layout]
    return missing + [f"{m.parent.name}/{m.name}" for m in modules if f"`{m.name}`" not in layout]


def test_the_code_layout_names_every_part_of_the_package():
    assert unnamed_parts(layout_rows((ROOT / "docs" / "architecture.md").read_text())) == []


def test_a_part_left_out_of_the_layout_is_found():
    layout = layout_rows((ROOT / "docs" / "architecture.md").read_text())
    assert "stages/runner.py" in unnamed_parts(layout.replace("`runner.py`", "the runner"))


def readme_settings(text: str) -> set[str]:
    """The ``FEEDPIPE_*`` variables of the README's configuration table."""
    section = text[text.index("### Configuration") : text.index("## Inputs")]
    rows = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    return set(re.findall(r"`FEEDPIPE_([A-Z_]+)`", rows))


def test_the_readme_settings_are_settings_and_include_the_contracts():
    names = readme_settings((ROOT / "README.md").read_text())
    fields = {f.upper() for f in Settings.__dataclass_fields__}
    assert names <= fields, names - fields
    contract = {"LANDING", "WAREHOUSE", "SPARK_MASTER", "PUSH_COST", "PULL_COST", "FEED_K"}
    contract |= {"RATE_WINDOW_DAYS", "STRATEGY", "COHERENCY"}  # ../shared/DESIGN.md
    assert contract <= names
    text = "### Configuration\n`FEEDPIPE_X`\n| k | `FEEDPIPE_FEED_K` |\n## Inputs `FEEDPIPE_Y`"
    assert readme_settings(text) == {"FEED_K"}


def test_the_readme_lists_every_published_table():
    outputs = (ROOT / "README.md").read_text().split("## Outputs", 1)[1].split("\n## ", 1)[0]
    for layer, table in PUBLISHED_TABLES:
        assert re.search(rf"`{layer}/(\{{[^}}]*\b{table}\b[^}}]*\}}|{table}\b)", outputs), table


def test_the_lineage_table_is_the_stage_registrys():
    """docs/architecture.md's lineage table is what ``jobs.common.pipeline.REGISTRY``
    declares, row for row (the runner refuses a stage that uses a table it does not declare,
    tests/stages/test_runner.py), and a table left out of the doc is found."""
    from jobs.common.pipeline import lineage_table

    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = lineage_table()
    assert table in doc
    row = table.splitlines()[3]
    assert table.replace(row + "\n", "") not in doc
