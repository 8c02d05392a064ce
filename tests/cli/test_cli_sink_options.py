"""``savepoint restore --sink-option NAME=VALUE``: a sink plugin's own inputs, parsed
once; refused where they would be dropped (a pipeline's restore)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_chkpt.cli import main
from spark_chkpt.cli.savepoint import _sink_options


def test_each_option_is_a_name_and_a_value() -> None:
    assert _sink_options(["path=/a=b", " mode =x"]) == {"path": "/a=b", "mode": "x"}
    with pytest.raises(SystemExit, match="--sink-option 'path': give name=value"):
        _sink_options(["path"])


def test_a_pipeline_restore_refuses_them_instead_of_dropping_them(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--sink-option gives one job's sink its inputs"):
        main(
            [
                "savepoint",
                "restore",
                "--pipeline",
                str(tmp_path / "pipeline"),
                "--checkpoint-dir",
                str(tmp_path / "chk"),
                "--mode",
                "rewind",
                "--sink-option",
                "path=/x",
            ]
        )
    assert not (tmp_path / "chk").exists()
