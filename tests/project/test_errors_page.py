"""docs/reference/errors.md stays true to the code (issue 39): every error class it names
exists in ``spark_chkpt.errors``, every test it cites exists, and the messages it quotes
for the refusals a user meets first are the ones the code raises."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from spark_chkpt import errors
from spark_chkpt.errors import MissingTopicError, PathNotFoundError, UnknownOptionError
from spark_chkpt.kafka.source.options import SourceConfig

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "reference" / "errors.md").read_text()
TESTS = ROOT / "tests"


def _test_functions() -> dict[str, set[str]]:
    """Test file name -> the names of the functions it defines."""
    found: dict[str, set[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        tree = ast.parse(path.read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        found.setdefault(path.name, set()).update(names)
    return found


def test_every_error_class_the_page_names_exists() -> None:
    named = set(re.findall(r"`([A-Z][A-Za-z]+(?:Error|Mismatch))`", PAGE))
    assert named, "the page names no error class"
    missing = sorted(n for n in named if not hasattr(errors, n))
    assert not missing, f"errors.md names classes spark_chkpt.errors lacks: {missing}"


def test_every_test_the_page_cites_exists() -> None:
    functions = _test_functions()
    cited = re.findall(r"`(test_\w+\.py)(?:::(test_\w+))?`", PAGE)
    assert cited
    for file, name in cited:
        assert file in functions, f"errors.md cites {file}, which does not exist"
        if name:
            assert name in functions[file], f"errors.md cites {file}::{name}, which does not exist"


def _quoted(fragment: str) -> str:
    """The page's quoted message in the row that holds ``fragment``."""
    rows = [line for line in PAGE.splitlines() if fragment in line]
    assert rows, f"errors.md has no row with {fragment!r}"
    return rows[0]


def test_the_misspelled_option_message_is_the_one_raised() -> None:
    with pytest.raises(UnknownOptionError) as raised:
        SourceConfig.from_options(
            {"kafka.bootstrap.servers": "h:9092", "subscribe": "t", "maxoffsetpertrigger": "5"}
        )
    assert str(raised.value) in _quoted("did you mean maxOffsetsPerTrigger?")


def test_the_missing_topic_message_is_the_one_raised() -> None:
    error = MissingTopicError(
        option="subscribe",
        value="evnets",
        missing=["evnets"],
        existing=["events", "alpha"],
        servers="HOST:PORT",
    )
    assert str(error) in _quoted("does not exist on HOST:PORT")


def test_the_path_not_found_message_is_the_one_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_chkpt.cli.paths import require_folder  # the CLI's check, before any work

    monkeypatch.chdir(tmp_path)
    with pytest.raises(PathNotFoundError) as raised:
        require_folder("chk-typo", what="checkpoint")
    assert f"spark-chkpt snapshots: {raised.value}" in _quoted("PathNotFoundError")


def test_the_catalog_table_messages_are_the_ones_raised(tmp_path: Path) -> None:
    from spark_chkpt.delta.sink.options import DeltaSinkConfig
    from spark_chkpt.delta.table.catalog import check_catalog
    from spark_chkpt.errors import CatalogTableError, ConfigError

    with pytest.raises(CatalogTableError) as other:
        check_catalog("main.db.events", current_catalog="spark_catalog", writer="chkpt-delta")
    assert str(other.value) in _quoted("is in catalog 'main'")
    base = {"checkpointlocation": str(tmp_path / "chk"), "table": "db.events"}
    with pytest.raises(ConfigError) as both:
        DeltaSinkConfig.from_options({**base, "path": str(tmp_path / "t")})
    assert str(both.value) in _quoted("give either option path or option table")
    with pytest.raises(ConfigError) as unresolved:
        DeltaSinkConfig.from_options(base)
    assert str(unresolved.value) in _quoted("call spark_chkpt.register(spark) before start()")
