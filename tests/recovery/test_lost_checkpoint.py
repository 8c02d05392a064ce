"""The checkpoint folder is lost after a kill -9 mid-run. Starting the job on a fresh
checkpoint is refused (it would write the table's data again). The Delta table's commits
carry every snapshot's source offsets: `spark-chkpt recover` writes a new checkpoint
from the table's last snapshot, and the job resumes exactly where the table ends."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_chkpt.testing.generator import produce_page_views
from tests.chains.test_exactly_once import EVENTS, _killed, assert_exactly_once, run_job
from tests.helpers import user_env

pytestmark = pytest.mark.fault


def recover(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_chkpt.cli",
            "recover",
            "--table",
            str(tmp_path / "table"),
            "--checkpoint",
            str(tmp_path / "chk"),
            *extra,
        ],
        cwd=tmp_path,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_lost_checkpoint_is_recovered_from_the_table(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=3)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=EVENTS)
    # Batch 1 reaches the table; the driver dies before Spark's commit log has it.
    _killed(run_job(tmp_path, bootstrap_servers, topic, kill_at="after-delta-commit@1"))
    rows_before = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().num_rows
    assert 0 < rows_before < EVENTS
    shutil.rmtree(tmp_path / "chk")

    # Without recovery, a fresh checkpoint would write the table's data again: refused.
    fresh = run_job(tmp_path, bootstrap_servers, topic)
    assert fresh.returncode == 1, fresh.stderr[-3000:]
    assert "QueryIdentityError" in fresh.stderr and "spark-chkpt recover" in fresh.stderr
    assert DeltaTable(str(tmp_path / "table")).to_pyarrow_table().num_rows == rows_before
    shutil.rmtree(tmp_path / "chk")

    result = recover(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "resumes at batch 2" in result.stdout, result.stdout
    # Recovering into a folder that holds a checkpoint is refused, naming it.
    again = recover(tmp_path)
    assert again.returncode == 2 and "already holds a Spark checkpoint" in again.stderr

    finished = run_job(tmp_path, bootstrap_servers, topic)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert_exactly_once(tmp_path)
