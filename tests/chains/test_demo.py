"""`make demo` end to end at a small size: kill -9 mid-batch, restart, exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fault


def test_demo_survives_kill_9_and_reports_exactly_once(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_chkpt.jobs.demo",
            "--events",
            "3000",
            "--more-events",
            "600",
            "--per-batch",
            "500",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "SIGKILL the job's whole process tree (Python, JVM, PySpark's workers) while" in out
    assert "rows in the table           3600" in out
    assert "missing / duplicated ids    0 / 0" in out
    assert "exactly-once                yes" in out
