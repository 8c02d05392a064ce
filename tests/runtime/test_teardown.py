"""The exit hook of :mod:`spark_chkpt.runtime.teardown`: a script that reads a Delta table with
delta-rs exits 0, without ``terminate called without an active exception`` (SIGABRT).

The abort is a race at interpreter exit between pyarrow's pool threads and CPython's
finalization; Spark plays no part, so plain scripts show it. Without the hook about half
of such runs abort (3 of 5 on this machine, 14 of 30 when it was traced), so twelve runs
in a row that all exit 0 leave a regression one chance in several thousand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from tests.helpers import user_env

RUNS = 12
SCRIPT = """
import sys
import spark_chkpt  # registers the exit hook, as every user's script that imports it
from deltalake import DeltaTable

table = DeltaTable(sys.argv[1]).to_pyarrow_table()
print("rows", table.num_rows)
"""


def test_a_script_reading_a_table_exits_0_every_time(tmp_path: Path) -> None:
    table = tmp_path / "table"
    for part in range(4):  # several files, so the scan keeps pyarrow's pools busy
        rows = pa.table({"id": list(range(part * 1000, (part + 1) * 1000))})
        write_deltalake(str(table), rows, mode="append")
    script = tmp_path / "read.py"
    script.write_text(SCRIPT)
    for run in range(RUNS):
        result = subprocess.run(
            [sys.executable, str(script), str(table)],
            cwd=tmp_path,
            env=user_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "terminate called" not in result.stderr, f"run {run}: {result.stderr[-2000:]}"
        assert result.returncode == 0, f"run {run} exited {result.returncode}: {result.stderr}"
        assert "rows 4000" in result.stdout
