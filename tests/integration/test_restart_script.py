"""A user's script under a restart strategy, run the way users run it: a subprocess
started from a folder outside the repo, with no ``PYSPARK_PYTHON`` in its environment.
Its sink fails twice and then works: the supervisor restarts the query in the same
driver and the script exits 0; a commit that always fails exits with the exhausted
strategy's code after the configured attempts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spark_chkpt.restart import ExitCode
from tests.helpers import user_env

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "restart_job.py"
FIXED_DELAY = (
    "--set",
    "restart-strategy.type=fixed-delay",
    "--set",
    "restart-strategy.fixed-delay.attempts=2",
    "--set",
    "restart-strategy.fixed-delay.delay=100ms",
)


def run_script(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    extra = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    return subprocess.run(
        [sys.executable, "my_job.py", *args],
        cwd=folder,
        env=user_env(**extra, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_supervised_script_recovers_from_transient_failures_and_stops_on_permanent_ones(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "my-project"
    folder.mkdir()
    shutil.copy(SCRIPT, folder / "my_job.py")

    recovered = run_script(folder, "transient", "--fail-times", "2", *FIXED_DELAY)
    assert recovered.returncode == ExitCode.OK, recovered.stderr[-4000:]
    assert "rows 2" in recovered.stdout
    restarts = [line for line in recovered.stderr.splitlines() if "restart #" in line]
    assert len(restarts) == 2, recovered.stderr[-4000:]
    assert "(task failure): RuntimeError: sink unavailable (failure 1 of 2)" in restarts[0]

    # Every commit of batch 0 fails (the fail point): a snapshot failure each time.
    failed = run_script(
        folder, "permanent", "--sink", "delta", *FIXED_DELAY, SPARK_CHKPT_FAIL_AT="in-commit@0"
    )
    assert failed.returncode == ExitCode.RESTARTS_EXHAUSTED == 3, failed.stderr[-4000:]
    restarts = [line for line in failed.stderr.splitlines() if "restart #" in line]
    assert len(restarts) == 2 and all("(snapshot failure)" in r for r in restarts)
    last = [line for line in failed.stderr.splitlines() if "Last cause:" in line][-1]
    assert "restart strategy exhausted (restart 2 of 2) after 2 restart(s); exit code 3" in last
    assert "InjectedFailureError: spark-chkpt fault injection: failing in-commit of batch 0" in last
