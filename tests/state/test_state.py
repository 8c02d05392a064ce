"""The state listing and the progress merge without Spark: a checkpoint folder laid out
as Spark writes it (observed with Spark 4.2), and progress entries as dicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_chkpt.errors import ChkptError
from spark_chkpt.metrics.reporter import merge_state_progress
from spark_chkpt.session import STATE_STORE_DEFAULTS, load_properties
from spark_chkpt.state.operators import check_retained, provider_of, state_operators

ROOT = Path(__file__).resolve().parents[2]
META = (
    'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
    '"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2}]}'
)


def write(path: Path, size: int = 10) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def rocksdb_checkpoint(root: Path) -> Path:
    chk = root / "chk"
    (chk / "state" / "0" / "_metadata").mkdir(parents=True)
    (chk / "state" / "0" / "_metadata" / "metadata").write_text(META)
    for p in (0, 1):
        part = chk / "state" / "0" / str(p)
        for v in (1, 2, 3, 4):
            write(part / f"{v}.changelog", 100)
            write(part / f".{v}.changelog.crc", 12)
        write(part / "3.zip", 4000)
        write(part / "SSTs" / "000008-aaaa.sst", 1200)
        write(part / "_metadata" / "schema", 50)
    for n in (0, 1, 2, 3):
        write(chk / "commits" / str(n))
    return chk


def test_a_version_counts_its_changelogs_and_the_zip_present(tmp_path: Path) -> None:
    chk = str(rocksdb_checkpoint(tmp_path))
    (at_2,) = state_operators(checkpoint_location=chk, batch_id=2)
    assert at_2.as_dict() == {
        "operator_id": 0,
        "name": "stateStoreSave",
        "store_names": ["default"],
        "version": 3,
        "partitions": 2,
        "provider": "rocksdb",
        "files": 4,
        "bytes": 2 * 100 + 2 * 4000,
        "snapshot_files": 2,
    }
    (at_3,) = state_operators(checkpoint_location=chk, batch_id=3, provider="rocksdb")
    assert (at_3.version, at_3.files, at_3.bytes) == (4, 2, 200)
    assert state_operators(checkpoint_location=str(tmp_path / "stateless"), batch_id=0) == []


def test_checkpoint_format_2_names_and_join_stores(tmp_path: Path) -> None:
    part = tmp_path / "chk" / "state" / "1" / "0"
    write(part / "left-keyToNumValues" / "5_0f1e-22.delta", 30)
    write(part / "right-keyToNumValues" / "5.delta", 20)
    write(part / "left-keyToNumValues" / "5.snapshot", 7)
    (op,) = state_operators(checkpoint_location=str(tmp_path / "chk"), batch_id=4)
    assert (op.operator_id, op.name, op.partitions, op.provider) == (1, None, 1, "hdfs")
    assert (op.files, op.bytes, op.snapshot_files) == (3, 57, 1)


def test_a_batch_not_committed_or_purged_is_named(tmp_path: Path) -> None:
    chk = rocksdb_checkpoint(tmp_path)
    (chk / "commits" / "0").unlink()
    assert check_retained(checkpoint_location=str(chk), batch_id=None) == 3
    with pytest.raises(ChkptError, match=r"batch 0 is no longer retained.*batches 1\.\.3"):
        check_retained(checkpoint_location=str(chk), batch_id=0)
    with pytest.raises(ChkptError, match=r"batch 9 is not committed"):
        check_retained(checkpoint_location=str(chk), batch_id=9)


def test_provider_from_the_offset_log_conf() -> None:
    assert (
        provider_of(
            {
                "spark.sql.streaming.stateStore.providerClass": STATE_STORE_DEFAULTS[
                    "spark.sql.streaming.stateStore.providerClass"
                ]
            }
        )
        == "rocksdb"
    )
    assert provider_of({}) is None


def test_progress_figures_join_the_operator_of_the_same_name() -> None:
    ops = [{"operator_id": 0, "name": "dedupe"}, {"operator_id": 1, "name": "stateStoreSave"}]
    progress = [
        {"operatorName": "dedupe", "numRowsTotal": 5, "numRowsUpdated": 1, "memoryUsedBytes": 9},
        {"operatorName": "stateStoreSave", "numRowsTotal": 3, "numRowsUpdated": 0},
    ]
    merged = merge_state_progress(ops, progress)
    assert merged[0] == {**ops[0], "keys": 5, "keys_updated": 1, "memory_bytes": 9}
    assert merged[1]["keys"] == 3
    assert ops[0] == {"operator_id": 0, "name": "dedupe"}  # the input is not changed
    swapped = merge_state_progress(ops, list(reversed(progress)))
    assert [op["keys"] for op in swapped] == [5, 3]
    assert merge_state_progress([], progress[:1])[0]["operator_id"] is None


def test_the_shipped_spark_defaults_match_the_session_defaults() -> None:
    props = load_properties(ROOT / "conf" / "spark-defaults.conf")
    assert {k: props[k] for k in STATE_STORE_DEFAULTS} == STATE_STORE_DEFAULTS
