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
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_chkpt.restart import ExitCode
from tests.helpers import produce, user_env

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
    assert (
        "restart strategy exhausted (restart 2 of 2) after 2 restart(s) (restart strategy "
        "fixed-delay: 2 attempt(s), 100 ms apart); exit code 3" in last
    )
    assert "InjectedFailureError: spark-chkpt fault injection: failing in-commit of batch 0" in last


def test_the_two_stage_job_runs_under_the_restart_strategy_it_is_given(
    tmp_path: Path,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: object,
) -> None:
    """The packaged two-stage job, as spark-submit users run it (stage b, into Delta): a
    commit that always fails is restarted the configured number of times and exits with
    the exhausted strategy's code (without ``--restart`` it would exit 1 at the first
    failure)."""
    middle = make_topic()
    produce(producer, middle, [b'{"app": "app1", "user_id": "u1"}'] * 3)
    extra = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    supervised = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_chkpt.jobs.two_stage",
            "--stage",
            "b",
            "--bootstrap-servers",
            bootstrap_servers,
            "--middle",
            middle,
            "--alignment",
            "none",
            "--table",
            str(tmp_path / "table"),
            "--checkpoint",
            str(tmp_path / "chk"),
            "--trigger",
            "availableNow",
            "--master",
            "local[1]",
            "--restart",
            "restart-strategy.type=fixed-delay",
            "--restart",
            "restart-strategy.fixed-delay.attempts=1",
            "--restart",
            "restart-strategy.fixed-delay.delay=100ms",
        ],
        cwd=tmp_path,
        env=user_env(**extra, SPARK_CHKPT_FAIL_AT="in-commit@0"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert supervised.returncode == ExitCode.RESTARTS_EXHAUSTED, supervised.stderr[-4000:]
    restarts = [line for line in supervised.stderr.splitlines() if "restart #" in line]
    assert len(restarts) == 1 and "(snapshot failure)" in restarts[0], supervised.stderr[-4000:]
