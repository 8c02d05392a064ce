"""``spark-chkpt`` given the wrong folder (issue 39): a path that does not exist is named
as such, the folder that keeps savepoints given to ``restore`` lists them, ``state`` on a
stateless query answers before Spark starts; a savepoint made is INFO, not a warning;
``--mode`` and ``recover`` appear in the help. On real checkpoint folders and delta-rs
tables (``tests/savepoint/test_fencing.py``'s ``Run``), without Spark."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from spark_chkpt.cli import main
from tests.savepoint.test_fencing import Run, ids_of


def fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("snapshots", "{missing}"), "snapshots: checkpoint {missing} does not exist"),
        (("state", "{missing}"), "state: checkpoint {missing} does not exist"),
        (("savepoint", "list", "{missing}"), "savepoint: savepoint folder {missing} does not"),
        (
            ("savepoint", "create", "{missing}", "--dir", "{tmp}/sp"),
            "savepoint: checkpoint {missing} does not exist",
        ),
        (
            ("savepoint", "restore", "{missing}", "--checkpoint", "{tmp}/new", "--mode", "fork"),
            "savepoint: savepoint {missing} does not exist",
        ),
        (("savepoint", "show", "{missing}"), "savepoint: savepoint {missing} does not exist"),
        (
            ("recover", "--table", "{missing}", "--checkpoint", "{tmp}/new"),
            "recover: table {missing} does not exist",
        ),
    ],
)
def test_a_path_that_does_not_exist_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], named: str
) -> None:
    missing = str(tmp_path / "no-such-folder")
    filled = [a.format(missing=missing, tmp=tmp_path) for a in argv]
    assert named.format(missing=missing) in fails(capsys, *filled)
    assert not (tmp_path / "new").exists() and not (tmp_path / "sp").exists()


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


def test_restore_given_the_folder_of_savepoints_lists_them(
    run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run.step(0, ids_of(0))
    first = run.savepoint(0)
    run.step(1, ids_of(1))
    second = run.savepoint(1)
    parent = str(tmp_path / "savepoints")
    err = fails(
        capsys, "savepoint", "restore", parent, "--checkpoint", f"{tmp_path}/new", "--mode", "fork"
    )
    assert f"{parent} is a folder of savepoints, not one savepoint; give one of the 2" in err
    assert f"{first}  (snapshot 0, manual)" in err and f"{second}  (snapshot 1, manual)" in err
    assert not (tmp_path / "new").exists()


def test_state_of_a_stateless_query_answers_before_spark_starts(
    run: Run, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run.step(0, ids_of(0))

    def no_spark(name: str) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr("spark_chkpt.cli.state.reader_session", no_spark)
    err = fails(capsys, "state", str(run.checkpoint))
    assert "holds no keyed state (no state/<operator> folder): the query is stateless" in err


def test_a_savepoint_made_is_logged_at_info_not_as_a_warning(
    run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    run.step(0, ids_of(0))
    with caplog.at_level(logging.INFO):
        code = main(["savepoint", "create", str(run.checkpoint), "--dir", str(tmp_path / "sp")])
    assert code == 0
    made = [r for r in caplog.records if r.getMessage().startswith("savepoint ")]
    assert made and all(r.levelno == logging.INFO for r in made)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_help_explains_mode_and_lists_recover(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "spark-chkpt recover --table TABLE --checkpoint NEW" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["savepoint", "restore", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "--mode {rewind,fork} rewind: the same query goes back to the savepoint" in helped


def test_the_command_run_by_a_user_names_the_missing_folder(run: Run, tmp_path: Path) -> None:
    """``spark-chkpt`` as a user runs it: a subprocess from a folder outside the repo,
    without PYSPARK_PYTHON; a stateless checkpoint's ``state`` answers without Spark."""
    from tests.helpers import chkpt_cli

    run.step(0, ids_of(0))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = chkpt_cli(elsewhere, "snapshots", "chk-typo")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "spark-chkpt snapshots: checkpoint chk-typo does not exist"
    done = chkpt_cli(elsewhere, "state", str(run.checkpoint))
    assert done.returncode == 2, done.stderr
    assert "holds no keyed state" in done.stderr and "SparkContext" not in done.stderr


def test_status_tells_where_a_query_stands_without_spark(
    run: Run,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spark_chkpt.cli.status import collect

    def no_spark(**kwargs: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr("spark_chkpt.session.build_session", no_spark)
    run.step(0, ids_of(0))
    run.step(1, ids_of(1))
    point = run.savepoint(1)
    status = collect(str(run.checkpoint), savepoint_dir=str(tmp_path / "savepoints"))
    assert status["generation"] == 0 and status["committed_batch"] == 1
    snap = status["last_snapshot"]
    assert (snap["batch"], snap["sink"], snap["table_version"]) == (1, "chkpt-delta", 1)
    assert snap["time"].endswith("Z")
    assert status["partitions"] == [
        {"topic": "events", "partition": 0, "committed": 20, "end": None, "lag": None}
    ]
    assert status["savepoints"] == [{"savepoint": point, "batch": 1, "reason": "manual"}]
    assert main(["status", str(run.checkpoint)]) == 0
    out = capsys.readouterr().out
    assert "query        " in out and "generation 0" in out
    assert "last snapshot  1 at " in out and "Delta version 1 of " in out
    assert "events-0" in out and "(--bootstrap-servers for each partition's end" in out
    assert "does not exist" in fails(capsys, "status", str(tmp_path / "nope"))


def test_status_shows_the_restart_strategys_failures_and_watches(
    run: Run, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A supervised job keeps its failures and restarts in the checkpoint
    (``chkpt/restarts.json``, written by the supervisor), and ``status`` shows them;
    ``--watch`` shows the status again every few seconds (``--count`` stops it)."""
    from spark_chkpt.metrics.restarts import RestartMetrics
    from spark_chkpt.restart.supervisor import write_restart_record

    run.step(0, ids_of(0))
    assert main(["status", str(run.checkpoint)]) == 0
    assert "restarts     none recorded" in capsys.readouterr().out
    metrics = RestartMetrics()
    metrics.failed(kind="task", cause="Python worker failed to connect back", snapshot=False)
    metrics.restarted(kind="task", cause="Python worker failed to connect back", delay_s=1.0)
    write_restart_record(
        checkpoint_location=str(run.checkpoint),
        strategy="fixed-delay: 3 attempt(s), 1000 ms apart",
        metrics=metrics,
        verdict="restart",
    )
    sleeps: list[float] = []
    monkeypatch.setattr("spark_chkpt.cli.status.time.sleep", sleeps.append)
    assert main(["status", str(run.checkpoint), "--watch", "2", "--count", "3"]) == 0
    out = capsys.readouterr().out
    line = (
        "restarts     1 after 1 failure(s), strategy fixed-delay: 3 attempt(s), 1000 ms "
        "apart; last: restart, task: Python worker failed to connect back"
    )
    assert out.count(line) == 3 and sleeps == [2.0, 2.0]
