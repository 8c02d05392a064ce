"""A savepoint carries the keyed state, whatever the provider: with RocksDB (changelog
checkpointing, the default here) and the HDFS-backed store, a savepoint of an older
snapshot copies only the files that load its version, restores into a new checkpoint
whose state reads back equal to the snapshot's (and to the counts of the Kafka records
below its offsets), and a query continued there ends with the counts of everything.
The choice of files with whole copies (``V.zip`` and its SSTs, ``V.snapshot``) is
checked on a folder laid out as Spark lays it out."""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.savepoint.manifest import create_savepoint
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.state.files import StateFilesError, state_files
from spark_chkpt.state.reader import read_state
from tests.state.test_state_spark import (
    EVENTS,
    HDFS,
    PROVIDER,
    counts_up_to,
    ends_of,
    page_views,
    run_counts,
    session_conf,
)

pytestmark = pytest.mark.integration

_VERSION = re.compile(r"^(\d+)(?:_[^.]+)?\.(delta|snapshot|changelog|zip)$")


@pytest.mark.parametrize("provider", ["rocksdb", "hdfs"])
def test_the_state_of_an_older_snapshot_restores_and_reads_back(
    spark: Any,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
    provider: str,
) -> None:
    topic = make_topic(partitions=2)
    page_views(producer, topic)
    chk = tmp_path / "chk"
    conf = (PROVIDER, HDFS) if provider == "hdfs" else (PROVIDER, spark.conf.get(PROVIDER))
    with session_conf(spark, *conf):
        run_counts(spark, bootstrap_servers, topic, chk)
    point = create_savepoint(
        checkpoint_location=str(chk), savepoint_dir=str(tmp_path / "sp"), batch_id=2
    )
    manifest = point.manifest
    assert (manifest.provider, manifest.state_version) == (provider, 3)
    (operator,) = manifest.operators
    assert operator.name == "stateStoreSave" and operator.partitions == 2
    # Only what loads version 3: no file of a later version, every store's of 1..3 (or a
    # whole copy and what follows it).
    versions = [
        int(m.group(1))
        for f in manifest.files
        if f.path.startswith("state/") and (m := _VERSION.match(Path(f.path).name))
    ]
    assert versions and max(versions) == 3
    assert sorted(f.path for f in manifest.files if not f.path.startswith("state/")) == [
        "commits/2", "metadata", "offsets/1", "offsets/2",
    ]  # fmt: skip

    restored = restore_savepoint(
        savepoint=point.location, checkpoint_location=str(tmp_path / "fork"), mode="fork"
    )
    assert restored.resumes_at == 3
    original = read_state(spark, checkpoint_location=str(chk), batch_id=2)
    copy = read_state(spark, checkpoint_location=str(tmp_path / "fork"))
    assert copy.batch_id == 2 and copy.rows == original.rows
    expected = counts_up_to(bootstrap_servers, topic, ends_of(chk, 2, topic))
    assert {r["app"]: r["count"] for r in copy.rows} == expected

    # The fork continues from there (the provider is the one offsets/2 records).
    run_counts(spark, bootstrap_servers, topic, tmp_path / "fork")
    final = read_state(spark, checkpoint_location=str(tmp_path / "fork"))
    assert sum(r["count"] for r in final.rows) == EVENTS
    assert final.rows == read_state(spark, checkpoint_location=str(chk)).rows


def _zip_with(ssts: list[str]) -> bytes:
    meta = {
        "sstFiles": [
            {"localFileName": s[:6] + ".sst", "dfsSstFileName": s, "sizeBytes": 7} for s in ssts
        ],
        "numKeys": 2,
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("metadata", "v1\n" + json.dumps(meta))
        archive.writestr("CURRENT", "MANIFEST-000005\n")
    return out.getvalue()


def test_whole_copies_and_what_follows_them(tmp_path: Path) -> None:
    rocks = tmp_path / "rocks" / "state" / "0"
    for part in ("0", "1"):
        store = rocks / part
        (store / "SSTs").mkdir(parents=True)
        (store / "_metadata").mkdir()
        (store / "_metadata" / "schema").write_text("s")
        for v in range(1, 8):
            (store / f"{v}.changelog").write_text("c")
        (store / "3.zip").write_bytes(_zip_with([f"000008-a{part}.sst"]))
        (store / "6.zip").write_bytes(_zip_with([f"000008-a{part}.sst", f"000010-b{part}.sst"]))
        for sst in (f"000008-a{part}.sst", f"000010-b{part}.sst", f"000012-c{part}.sst"):
            (store / "SSTs" / sst).write_text("sst")
        (store / ".5.changelog.crc").write_text("x")
    (rocks / "_metadata").mkdir()
    (rocks / "_metadata" / "metadata").write_text("v1\n{}")
    picked = [
        f.path
        for f in state_files(
            checkpoint_location=str(tmp_path / "rocks"), batch_id=4, provider="rocksdb"
        )
    ]
    # Version 5: zip 3, its SST, changelogs 4 and 5; never 6.zip, 6+ changelogs, other SSTs.
    assert picked == [
        "0/0/3.zip", "0/0/4.changelog", "0/0/5.changelog", "0/0/SSTs/000008-a0.sst",
        "0/0/_metadata/schema",
        "0/1/3.zip", "0/1/4.changelog", "0/1/5.changelog", "0/1/SSTs/000008-a1.sst",
        "0/1/_metadata/schema",
        "0/_metadata/metadata",
    ]  # fmt: skip
    later = [
        f.path
        for f in state_files(
            checkpoint_location=str(tmp_path / "rocks"), batch_id=6, provider="rocksdb"
        )
    ]
    assert "0/0/6.zip" in later and "0/0/SSTs/000010-b0.sst" in later and "0/0/7.changelog" in later
    assert "0/0/3.zip" not in later and "0/0/SSTs/000012-c0.sst" not in later

    hdfs = tmp_path / "hdfs" / "state" / "0" / "0"
    hdfs.mkdir(parents=True)
    for v in range(1, 6):
        (hdfs / f"{v}.delta").write_text("d")
    (hdfs / "2.snapshot").write_text("s")
    picked = [
        f.path
        for f in state_files(
            checkpoint_location=str(tmp_path / "hdfs"), batch_id=3, provider="hdfs"
        )
    ]
    assert picked == ["0/0/2.snapshot", "0/0/3.delta", "0/0/4.delta"]
    (hdfs / "3.delta").unlink()
    with pytest.raises(StateFilesError, match=r"3\.delta is missing"):
        state_files(checkpoint_location=str(tmp_path / "hdfs"), batch_id=3, provider="hdfs")
