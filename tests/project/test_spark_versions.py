"""The support matrix page (docs/reference/spark-versions.md) says what CI runs: its lines
table is the Makefile's pyspark versions (``PYSPARK_VERSION`` for ``.venv``,
``OTHER_PYSPARK_VERSIONS`` for the second pass's venvs) and
``spark_chkpt.runtime.spark_version.LINES`` (the jars fetched for each line), row by
row; the wheel's metadata names a range, not a pyspark version."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from spark_chkpt.runtime.spark_version import DELTA_SPARK_VERSION, LINES, version_tuple

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "spark-versions.md"


def makefile_versions() -> tuple[str, list[str]]:
    text = (ROOT / "Makefile").read_text()
    default = re.search(r"^PYSPARK_VERSION := (\S+)$", text, re.MULTILINE)
    others = re.search(r"^OTHER_PYSPARK_VERSIONS := (.+)$", text, re.MULTILINE)
    assert default and others, "the Makefile names no PYSPARK_VERSION / OTHER_PYSPARK_VERSIONS"
    return default.group(1), others.group(1).split()


def table_after(heading: str) -> list[list[str]]:
    """The rows of the first table under ``heading`` (header and rule left out)."""
    text = PAGE.read_text().split(f"## {heading}\n", 1)[1]
    table = text[text.index("\n|") + 1 :].split("\n\n", 1)[0].splitlines()
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]


def test_the_lines_table_is_what_ci_runs() -> None:
    default, others = makefile_versions()
    rows = table_after("The lines CI runs")
    assert [row[1] for row in rows] == [default, *others], "the page's pyspark column"
    by_line = {line.line: line for line in LINES}
    assert sorted(by_line) == sorted(row[0] for row in rows), "spark_version.LINES"
    for spark_line, pyspark, databricks, kafka, delta in rows:
        line = by_line[spark_line]
        assert version_tuple(pyspark) == version_tuple(spark_line)
        assert (line.pyspark, line.databricks, line.kafka_connector) == (pyspark, databricks, kafka)
        assert delta == f"{line.delta_spark} {DELTA_SPARK_VERSION}"


def test_the_feature_table_has_a_column_per_line() -> None:
    rows = table_after("Formats and features")
    header = PAGE.read_text().split("## Formats and features\n", 1)[1]
    columns = [c.strip() for c in header[header.index("|") :].splitlines()[0].strip("|").split("|")]
    assert columns[1:] == sorted((line.line for line in LINES), key=version_tuple)
    assert rows and all(len(row) == len(columns) for row in rows)


def test_the_wheel_requires_a_range_of_pyspark() -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    requires = [
        line.strip()
        for line in parser["options"]["install_requires"].splitlines()
        if line.strip().startswith("pyspark")
    ]
    assert requires == ["pyspark>=4.0,<5"]
