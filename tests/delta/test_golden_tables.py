"""Tables with the protocols of Delta's own golden tables (tests/delta/golden/README.md:
which golden table each has the protocol of, and where it is): the protocol check a
query's ``start()`` runs (:meth:`DeltaTarget.check_features`, over
:func:`~spark_chkpt.delta.features.protocol.read_protocol` and the ``FEATURES`` table) accepts the
implemented features and refuses the others naming the feature, an unknown one too;
where spark-chkpt writes such a table without Spark, a batch is appended through
:meth:`DeltaTarget.commit` (staged as the sink stages it) and read back by delta-rs.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from spark_chkpt.delta.features.protocol import FEATURES
from spark_chkpt.delta.staging import ParquetStager
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import TableFeatureError
from spark_chkpt.fs import resolve

GOLDEN = Path(__file__).parent / "golden"

# table -> the features the check accepts for an append
ACCEPTED = {
    "data-reader-timestamp_ntz": ["timestampNtz"],
    "data-reader-timestamp_ntz-id-mode": ["columnMapping", "timestampNtz"],
    "dv-partitioned-with-checkpoint": ["deletionVectors"],
    # legacy protocol (reader 2, writer 5): the features writer version 5 implies
    "table-with-columnmapping-mode-name": [
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
    ],
}
# table -> the feature named in the refusal, and whether FEATURES knows it
REFUSED = {
    "spark-variant-checkpoint": ("variantType-preview", True),
    "table-with-icebegCompatV2Enabled": ("icebergCompatV2", True),
    "collations-table": ("collations", False),
    # delta-rs cannot load it (a catalog-managed table): refused when it is opened
    "catalog-owned-preview": ("catalogManaged", False),
}


def copy(name: str, tmp_path: Path) -> DeltaTarget:
    shutil.copytree(GOLDEN / name, tmp_path / name)
    return DeltaTarget(uri=str(tmp_path / name))


def test_every_fixture_is_checked_here() -> None:
    names = {p.name for p in GOLDEN.iterdir() if p.is_dir()}
    assert names == set(ACCEPTED) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_a_golden_protocol_with_implemented_features_is_accepted(tmp_path: Path, name: str) -> None:
    from spark_chkpt.delta.features.protocol import read_protocol

    target = copy(name, tmp_path)
    table = target.require()
    assert read_protocol(table, uri=target.uri).required() == ACCEPTED[name]
    assert all(FEATURES[f].implemented for f in ACCEPTED[name])
    for writer in ("chkpt-delta", "DeltaUpsert"):
        target.check_features(table, writer=writer, operation="append")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_golden_protocol_with_a_refused_or_unknown_feature_is_refused_naming_it(
    tmp_path: Path, name: str
) -> None:
    feature, known = REFUSED[name]
    assert (feature in FEATURES) == known and not (known and FEATURES[feature].implemented)
    target = copy(name, tmp_path)
    for operation in ("append", "overwrite", "merge"):
        with pytest.raises(TableFeatureError) as caught:
            target.check_features(target.open(), writer="chkpt-delta", operation=operation)
        message = str(caught.value)
        assert f"requires table feature '{feature}'" in message, message
        assert target.uri in message and "Way forward" in message
        if not known:
            assert "unknown to this version of spark-chkpt" in message
    with pytest.raises(TableFeatureError, match=f"'{feature}'"):
        target.check_features(target.require(), writer="DeltaUpsert", operation="merge")


# table -> (the batch appended, its partition columns)
APPENDS = {
    "data-reader-timestamp_ntz": (
        pa.table(
            {
                "id": pa.array([1, 2], pa.int32()),
                "tsNtz": pa.array([dt.datetime(2024, 1, 1), None], pa.timestamp("us")),
            }
        ),
        [],
    ),
    "dv-partitioned-with-checkpoint": (
        pa.table(
            {"value": pa.array([1, 2, 3], pa.int32()), "part": pa.array([0, 1, 1], pa.int32())}
        ),
        ["part"],
    ),
    "table-with-columnmapping-mode-name": (
        pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", None]}),
        [],
    ),
}


@pytest.mark.parametrize("name", sorted(APPENDS))
def test_a_golden_protocol_table_takes_an_append_read_back_by_delta_rs(
    tmp_path: Path, name: str
) -> None:
    batch, partition_by = APPENDS[name]
    target = copy(name, tmp_path)
    table = target.require()
    target.check_features(table, writer="chkpt-delta", operation="append")
    stager = ParquetStager(
        table=resolve(target.uri),
        schema=batch.schema,
        partition_by=partition_by,
        app_id="app",
        batch_id=0,
        task=0,
        max_records_per_file=100,
        target_file_bytes=1 << 30,
        mapping=target.planned_mapping(batch.schema, table),
    )
    for b in batch.to_batches():
        stager.add(b)
    out = stager.finish()
    target.commit(
        table=table,
        schema=batch.schema,
        partition_by=partition_by,
        files=out.files,
        app_id="app",
        version=0,
        metadata={},
    )
    after = target.require()
    assert after.version() == 1 and after.transaction_version("app") == 0
    got = target.rows(after).select(batch.column_names)
    key = batch.column_names[0]
    assert sorted(got.to_pylist(), key=lambda r: r[key]) == batch.sort_by(key).to_pylist()
