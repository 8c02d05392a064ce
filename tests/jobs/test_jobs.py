"""The jobs as users start them: spark-submit, with the project's conf files."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_spark_submit_runs_kafka_to_delta(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=500)
    # An activated venv: pip's spark-submit finds Spark and the driver's Python on PATH.
    bin_dir = Path(sys.executable).parent
    env = user_env(PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(bin_dir.parent))
    result = subprocess.run(
        [
            "spark-submit",
            "--master",
            "local[2]",
            "--properties-file",
            str(ROOT / "conf" / "spark-defaults.conf"),
            str(ROOT / "jobs" / "kafka_to_delta.py"),
            "--conf-file",
            str(ROOT / "conf" / "kafka_to_delta.properties"),
            "--bootstrap-servers",
            bootstrap_servers,
            "--topic",
            topic,
            "--table",
            str(tmp_path / "table"),
            "--checkpoint",
            str(tmp_path / "chk"),
            "--schema",
            PAGE_VIEW_SCHEMA_DDL,
            "--trigger",
            "availableNow",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = DeltaTable(str(tmp_path / "table"))
    ids = sorted(table.to_pyarrow_table().column("event_id").to_pylist())
    assert ids == list(range(500))
    assert table.metadata().partition_columns == ["app"]  # from the conf file


def test_spark_submit_runs_page_views_in_upsert_mode(
    bootstrap_servers: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The seeds' counts as a user submits them: conf files, upsert through foreachBatch,
    the state store on RocksDB (spark-defaults.conf)."""
    from collections import Counter

    from spark_chkpt.testing.generator import PageViews

    topic = make_topic(partitions=2)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=700)
    bin_dir = Path(sys.executable).parent
    env = user_env(PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(bin_dir.parent))
    result = subprocess.run(
        [
            "spark-submit",
            "--master",
            "local[2]",
            "--properties-file",
            str(ROOT / "conf" / "spark-defaults.conf"),
            str(ROOT / "jobs" / "page_views.py"),
            "--conf-file",
            str(ROOT / "conf" / "page_views.properties"),
            "--mode",
            "upsert",
            "--bootstrap-servers",
            bootstrap_servers,
            "--topic",
            topic,
            "--table",
            str(tmp_path / "counts"),
            "--checkpoint",
            str(tmp_path / "chk"),
            "--trigger",
            "availableNow",
            "--max-offsets-per-trigger",
            "300",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = DeltaTable(str(tmp_path / "counts")).to_pyarrow_table().to_pylist()
    views = PageViews()
    assert {r["app"]: r["count"] for r in rows} == dict(
        Counter(str(views.event(i)["app"]) for i in range(700))
    )
    offsets = (tmp_path / "chk" / "offsets" / "0").read_text()
    assert "RocksDBStateStoreProvider" in offsets  # the provider spark-defaults.conf sets
