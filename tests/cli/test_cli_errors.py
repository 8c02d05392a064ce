"""``spark-chkpt`` run as a user runs it (the installed command, from a folder outside
the repository, without ``PYSPARK_PYTHON``) on the wrong input (issue 51): one
``spark-chkpt <command>:`` line naming what is wrong, a non-zero exit, no traceback and
no second line of delta-rs's Rust error. Real checkpoint folders and delta-rs tables
(``tests/savepoint/test_fencing.py``'s ``Run``), no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import chkpt_cli
from tests.savepoint.test_fencing import Run


def one_line(done: object, *, starts: str) -> str:
    err = str(getattr(done, "stderr", "")).strip()
    assert getattr(done, "returncode", 0) != 0, err
    assert "Traceback" not in err and "Error: Os" not in err, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(starts), err
    assert not err.startswith(starts + " " + starts.split()[-1]), err  # no doubled prefix
    return err


def test_status_of_a_file_names_it_as_not_a_folder(tmp_path: Path) -> None:
    plain = tmp_path / "chk.txt"
    plain.write_text("not a checkpoint\n")
    err = one_line(chkpt_cli(tmp_path, "status", str(plain)), starts="spark-chkpt status:")
    assert f"checkpoint {plain} is a file, not a folder" in err


@pytest.mark.parametrize("command", ["lineage", "diff"])
def test_a_missing_table_is_one_line(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "no-such-table"
    argv = (
        ["lineage", str(missing), "--version", "0"]
        if command == "lineage"
        else ["diff", str(missing), str(tmp_path / "other")]
    )
    err = one_line(chkpt_cli(tmp_path, *argv), starts=f"spark-chkpt {command}:")
    assert f"{missing} is not a Delta table" in err
    assert "lineage: lineage:" not in err


def test_lineage_of_a_version_the_table_lacks_has_one_prefix(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.step(0, [1, 2])
    err = one_line(
        chkpt_cli(tmp_path, "lineage", str(run.table), "--version", "7"),
        starts="spark-chkpt lineage:",
    )
    assert "has no version 7 in its history" in err


def test_lineage_with_kafka_bootstrap_servers_set_but_empty(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.step(0, [1, 2])
    done = chkpt_cli(
        tmp_path, "lineage", str(run.table), "--version", "0", KAFKA_BOOTSTRAP_SERVERS=""
    )
    err = one_line(done, starts="spark-chkpt lineage:")
    assert "$KAFKA_BOOTSTRAP_SERVERS is set but empty" in err
    # Unset, the same table's lineage stops at its writer.
    assert chkpt_cli(tmp_path, "lineage", str(run.table), "--version", "0").returncode == 0
