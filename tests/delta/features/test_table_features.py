"""Delta table features (issue 47): the one table of features, the check of a table's
protocol and metadata (pure, on :class:`TableProtocol`), and a feature another writer
turns on while a batch is staged, found at the commit (no retries as conflicts).

The tables here are real Delta tables (delta-rs) in ``tmp_path``; the other writer's
commit that turns a feature on is a protocol action written into the log as a writer
that has the feature would write it. The matrix against delta-spark's own tables is
``tests/delta/test_delta_features.py``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.delta.features.protocol import (
    FEATURES,
    TableProtocol,
    check_creation_properties,
    check_table,
)
from spark_chkpt.errors import ConfigError, TableFeatureError
from tests.delta.sink.test_coordinator import SCHEMA, Query, make_batch

ROOT = Path(__file__).resolve().parents[3]
ERRORS_PAGE = (ROOT / "docs" / "reference" / "errors.md").read_text()
LIMITS_PAGE = (ROOT / "docs" / "known-limits.md").read_text()


def protocol(
    *,
    writer: int = 7,
    reader: int = 1,
    writer_features: tuple[str, ...] = (),
    reader_features: tuple[str, ...] = (),
    configuration: dict[str, str] | None = None,
    columns: tuple[tuple[str, bool, dict[str, object]], ...] = (("id", True, {}),),
) -> TableProtocol:
    return TableProtocol(
        uri="/data/t",
        min_reader_version=reader,
        min_writer_version=writer,
        reader_features=frozenset(reader_features),
        writer_features=frozenset(writer_features),
        configuration=dict(configuration or {}),
        columns=columns,
    )


def refused(name: str) -> TableFeatureError:
    """The error the check raises for a table whose protocol lists ``name`` (used)."""
    feature = FEATURES.get(name)
    # a table that uses each feature (column mapping's mode, a constraint, ...)
    config = {"delta.columnMapping.mode": "name", "delta.constraints.small": "id < 150"}
    columns: tuple[tuple[str, bool, dict[str, object]], ...] = (
        ("id", True, {"delta.invariants": '{"expression": {"expression": "id > 0"}}'}),
        ("id2", True, {"delta.generationExpression": "id * 2"}),
    )
    with pytest.raises(TableFeatureError) as raised:
        check_table(
            protocol(writer_features=(name,), configuration=config, columns=columns),
            writer="chkpt-delta",
            operation="append",
        )
    assert raised.value.feature == name and (feature is None or not feature.implemented)
    return raised.value


def test_the_table_names_every_feature_once_implemented_or_refused_with_a_way_forward() -> None:
    assert "rowTracking" in FEATURES and "columnMapping" in FEATURES
    for name, feature in FEATURES.items():
        assert feature.name == name and feature.meaning
        if not feature.implemented:
            assert feature.way_forward, name


@pytest.mark.parametrize(
    "name", [*sorted(n for n, f in FEATURES.items() if not f.implemented), "someFutureFeature"]
)
def test_each_refusal_names_feature_table_and_way_forward_and_is_on_the_errors_page(
    name: str,
) -> None:
    error = refused(name)
    text = str(error)
    assert f"'{name}'" in text and "/data/t" in text and "Nothing was staged" in text
    # The errors page quotes each message with the table as TABLE.
    assert text.replace("/data/t", "TABLE") in ERRORS_PAGE, text
    if name in FEATURES:
        assert f"`{name}`" in LIMITS_PAGE, f"known-limits.md does not list {name}"


def test_legacy_writer_versions_imply_their_features() -> None:
    # writer version 6 implies identity columns: appended to and replaced by
    # spark-chkpt's own commit, refused for what delta-rs 1.x would commit (it cannot
    # commit to such tables)
    check_table(protocol(writer=6), writer="chkpt-delta", operation="append")
    check_table(protocol(writer=6), writer="chkpt-delta", operation="overwrite")
    with pytest.raises(TableFeatureError, match="'identityColumns'"):
        check_table(protocol(writer=6), writer="DeltaUpsert", operation="merge")
    # version 5 implies column mapping, which both writers implement (staged files
    # with physical names and field ids), with a mode set or not
    check_table(protocol(writer=5), writer="chkpt-delta", operation="append")
    check_table(
        protocol(writer=5, reader=2, configuration={"delta.columnMapping.mode": "name"}),
        writer="chkpt-delta",
        operation="append",
    )
    for version in (1, 2, 3, 4):
        check_table(protocol(writer=version), writer="chkpt-delta", operation="append")


def test_append_only_refuses_what_removes_rows_only() -> None:
    table = protocol(writer=2, configuration={"delta.appendOnly": "true"})
    check_table(table, writer="chkpt-delta", operation="append")
    for writer, operation in (("chkpt-delta", "overwrite"), ("DeltaUpsert", "merge")):
        with pytest.raises(TableFeatureError) as raised:
            check_table(table, writer=writer, operation=operation)
        assert raised.value.feature == "appendOnly" and "delta.appendOnly" in str(raised.value)
        assert str(raised.value).replace("/data/t", "TABLE") in ERRORS_PAGE
    check_table(protocol(writer=2), writer="DeltaUpsert", operation="merge")


OWN_COMMIT = ("rowTracking", "inCommitTimestamp", "typeWidening", "clustering", "domainMetadata")


@pytest.mark.parametrize("name", OWN_COMMIT)
def test_an_own_commit_feature_takes_appends_and_replacements_and_a_merge_with_delta_spark(
    name: str,
) -> None:
    table = protocol(writer_features=(name, "domainMetadata"))
    check_table(table, writer="chkpt-delta", operation="append")
    check_table(table, writer="chkpt-delta", operation="overwrite")
    check_table(table, writer="DeltaUpsert", operation="spark_merge")
    # DeltaUpsert in a session without delta-spark: its MERGE would be delta-rs's
    with pytest.raises(TableFeatureError) as raised:
        check_table(table, writer="DeltaUpsert", operation="merge")
    text = str(raised.value)
    assert raised.value.feature == name and "a session with delta-spark" in text
    assert text.replace("/data/t", "TABLE") in ERRORS_PAGE, text
    # delta.appendOnly still refuses a MERGE through delta-spark
    only = protocol(writer_features=(name, "domainMetadata", "appendOnly"),
                    configuration={"delta.appendOnly": "true"})  # fmt: skip
    with pytest.raises(TableFeatureError, match="'appendOnly'"):
        check_table(only, writer="DeltaUpsert", operation="spark_merge")
    creation = {
        "rowTracking": "delta.enableRowTracking",
        "inCommitTimestamp": "delta.enableInCommitTimestamps",
        "typeWidening": "delta.enableTypeWidening",
    }
    if name in creation:  # appended to, not created: delta-rs creates the table
        with pytest.raises(TableFeatureError, match=f"'{name}'.*does not create them"):
            check_creation_properties({creation[name]: "true"})


def test_an_own_commit_feature_on_a_store_without_put_if_absent_is_refused_naming_it() -> None:
    from spark_chkpt.delta.log.commit import check_own_commit_store

    for uri in ("/data/t", "s3://bucket/t", "s3a://bucket/t"):
        check_own_commit_store(
            replace(protocol(writer_features=("rowTracking", "domainMetadata")), uri=uri),
            writer="chkpt-delta",
        )
    found = replace(protocol(writer_features=("rowTracking", "domainMetadata")), uri="gs://b/t")
    with pytest.raises(TableFeatureError) as raised:
        check_own_commit_store(found, writer="chkpt-delta")
    assert "'rowTracking'" in str(raised.value) and "gs://" in str(raised.value)
    assert str(raised.value).replace("gs://b/t", "TABLE").replace("gs://", "STORE") in ERRORS_PAGE
    check_own_commit_store(replace(protocol(), uri="gs://b/t"), writer="chkpt-delta")


def test_creation_properties_that_turn_on_a_refused_feature_are_refused() -> None:
    assert check_creation_properties({"delta.enablechangedatafeed": "true"}) == {
        "delta.enableChangeDataFeed": "true"
    }
    with pytest.raises(TableFeatureError, match="'rowTracking'"):
        check_creation_properties({"delta.enablerowtracking": "true"})
    with pytest.raises(ConfigError, match=r"delta\.enableChangeDataFeed"):
        check_creation_properties({"delta.enablechangedatafed": "true"})


def _turn_on(table: Path, version: int, *, features: list[str]) -> None:
    """Another writer's commit that upgrades the table's protocol to ``features``."""
    actions = [
        {
            "commitInfo": {
                "timestamp": 1_700_000_000_000,
                "operation": "SET TBLPROPERTIES",
                "engineInfo": "Apache-Spark/4.2.0 Delta-Lake/4.4.0",
            }
        },
        {
            "protocol": {
                "minReaderVersion": 1,
                "minWriterVersion": 7,
                "writerFeatures": ["appendOnly", "invariants", *features],
            }
        },
    ]
    path = table / "_delta_log" / f"{version:020d}.json"
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_a_feature_turned_on_while_a_batch_is_staged_fails_at_commit_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    q = Query(tmp_path)
    write_deltalake(str(q.table), pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]))
    staged = q.stage(0, [1, 2])
    # someone else turns column defaults on between the start and the commit (row
    # tracking turned on meanwhile is committed: tests/delta/log/test_log_commit.py)
    _turn_on(q.table, 1, features=["allowColumnDefaults"])
    caplog.set_level(logging.WARNING)
    with pytest.raises(TableFeatureError) as raised:
        q.commit(0, staged)
    assert raised.value.feature == "allowColumnDefaults"
    assert str(q.table) in str(raised.value)
    assert "commit conflict" not in caplog.text
    assert DeltaTable(str(q.table)).version() == 1  # nothing committed


def test_a_constraint_added_while_a_batch_is_staged_fails_the_commit_naming_it(
    tmp_path: Path,
) -> None:
    q = Query(tmp_path)
    write_deltalake(str(q.table), pa.Table.from_batches([make_batch(SCHEMA, [0], ["a"])]))
    staged = q.stage(0, [1, 2])  # checked against no rule
    DeltaTable(str(q.table)).alter.add_constraint({"small": "id < 150"})
    q.plan(0)
    coordinator = q.coordinator()
    coordinator.staged_rules = frozenset()
    with pytest.raises(TableFeatureError, match="CHECK constraint small") as raised:
        coordinator.commit(messages=[staged], batch_id=0, schema=SCHEMA)
    assert "Nothing was committed" in str(raised.value)
    assert DeltaTable(str(q.table)).version() == 1


def test_delta_rs_refusing_a_feature_is_no_commit_conflict() -> None:
    from deltalake.exceptions import CommitFailedError

    from spark_chkpt.delta.table.actions import is_conflict

    assert not is_conflict(
        CommitFailedError("Unsupported table features required: [InCommitTimestamp]")
    )
    assert is_conflict(CommitFailedError("Transaction failed: version already exists"))


def test_identity_columns_take_appends_replacements_and_a_merge_with_delta_spark() -> None:
    """Appends and complete mode's replacement generate identity values and move the
    high-water mark in the own commit (as delta-spark's INSERT OVERWRITE does); a MERGE
    is delta-spark's, which generates them, so delta-rs's MERGE is refused."""
    table = protocol(writer_features=("identityColumns",))
    check_table(table, writer="chkpt-delta", operation="append")
    check_table(table, writer="chkpt-delta", operation="overwrite")
    check_table(table, writer="DeltaUpsert", operation="spark_merge")
    with pytest.raises(TableFeatureError) as raised:
        check_table(table, writer="DeltaUpsert", operation="merge")
    text = str(raised.value)
    assert raised.value.feature == "identityColumns" and "outputMode('complete')" in text
    assert text.replace("/data/t", "TABLE") in ERRORS_PAGE, text
