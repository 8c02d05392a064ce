"""``savepoint restore --sink-option NAME=VALUE``: a sink plugin's own inputs, parsed
once; a pipeline's restore hands each job its own (``JOB:NAME=VALUE``) and refuses one
that names no job instead of dropping it."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_chkpt.cli import main
from spark_chkpt.cli.pipeline import sink_options as _sink_options


def restore_pipeline(tmp_path: Path, *sink_options: str) -> list[str]:
    """``savepoint restore --pipeline`` of ``tmp_path/pipeline`` as a rewind, with these
    ``--sink-option`` values."""
    command = ["savepoint", "restore", "--pipeline", str(tmp_path / "pipeline")]
    command += ["--checkpoint-dir", str(tmp_path / "chk"), "--mode", "rewind"]
    for option in sink_options:
        command += ["--sink-option", option]
    return command


def test_each_option_is_a_name_and_a_value() -> None:
    assert _sink_options(["path=/a=b", " mode =x"]) == {"path": "/a=b", "mode": "x"}
    with pytest.raises(SystemExit, match="--sink-option 'path': give name=value"):
        _sink_options(["path"])


def test_a_pipeline_restore_refuses_them_instead_of_dropping_them(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--sink-option gives one job's sink its inputs"):
        main(restore_pipeline(tmp_path, "path=/x"))
    assert not (tmp_path / "chk").exists()


def test_a_pipeline_restore_hands_each_job_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_chkpt.savepoint.pipeline import restore as pipeline_restore
    from spark_chkpt.savepoint.pipeline.manifest import Pipeline, PipelineJob, PipelineManifest

    jobs = [
        PipelineJob(
            name=name,
            checkpoint=str(tmp_path / name),
            savepoint=name,
            batch_id=1,
            query_id=f"q-{name}",
            sink="chkpt-delta",
            target=str(tmp_path / f"t-{name}"),
            app_id=f"q-{name}",
        )
        for name in ("a", "b")
    ]
    manifest = PipelineManifest(name="p", pipeline_id="p1", jobs=jobs, joins=[])
    monkeypatch.setattr(
        pipeline_restore,
        "load_pipeline",
        lambda *, location: Pipeline(location=str(tmp_path / "pipeline"), manifest=manifest),
    )
    given: dict[str, dict[str, str]] = {}

    def restore_savepoint(**kwargs: object) -> object:
        name = str(kwargs["savepoint"]).rsplit("/", 1)[-1]
        given[name] = dict(kwargs["sink_options"] or {})  # type: ignore[call-overload]
        if not kwargs["check_only"]:
            raise SystemExit(0)  # every job checked: what each was given is known
        return None

    monkeypatch.setattr(pipeline_restore, "restore_savepoint", restore_savepoint)
    with pytest.raises(SystemExit):
        main(restore_pipeline(tmp_path, "b:path=/x", "b:mode=y"))
    assert given == {"a": {}, "b": {"path": "/x", "mode": "y"}}


def test_a_pipeline_option_names_its_job() -> None:
    from spark_chkpt.cli.pipeline import job_sink_options

    assert job_sink_options(["a:path=/x", "a:n=1", "b:p=q"]) == {
        "a": {"path": "/x", "n": "1"},
        "b": {"p": "q"},
    }
    with pytest.raises(SystemExit, match="--sink-option gives one job's sink its inputs"):
        job_sink_options(["path=/x"])
