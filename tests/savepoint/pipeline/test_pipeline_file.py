"""The pipeline file of ``savepoint create --pipeline-file``
(spark_chkpt.savepoint.pipeline.file): parsed once and whole, one error naming the file
and the key, and the topics it declares checked against what the checkpoints show."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_chkpt.errors import SavepointError
from spark_chkpt.savepoint.pipeline.create import create_pipeline_savepoint_from_file
from spark_chkpt.savepoint.pipeline.file import (
    DeclaredJob,
    check_declared,
    load_pipeline_file,
    parse_pipeline,
)

GOOD = """
name = "page-views"
bootstrap_servers = "broker:9092"
timeout = 30

[[jobs]]
checkpoint = "s3://b/chk/enrich"
reads = ["raw"]
writes = ["enriched"]

[[jobs]]
checkpoint = "s3://b/chk/count"
reads = ["enriched"]
"""


def test_a_toml_file_lists_the_jobs_in_order(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(GOOD)
    spec = load_pipeline_file(path=str(path))
    assert (spec.name, spec.bootstrap_servers, spec.timeout_s) == ("page-views", "broker:9092", 30)
    assert spec.savepoint_dir is None
    assert spec.checkpoints == ["s3://b/chk/enrich", "s3://b/chk/count"]
    assert spec.jobs[0].writes == {"enriched"} and spec.jobs[1].writes is None


def test_a_json_file_by_its_ending(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.json"
    path.write_text(
        '{"name": "p", "bootstrap_servers": "b:9092", "savepoint_dir": "/sp", '
        '"jobs": [{"checkpoint": "/a"}, {"checkpoint": "/b", "reads": ["t"]}]}'
    )
    spec = load_pipeline_file(path=str(path))
    assert spec.savepoint_dir == "/sp" and spec.jobs[1].reads == {"t"}


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            'bootstrap_servers = "b"\n[[jobs]]\ncheckpoint = "/a"\n[[jobs]]\ncheckpoint = "/b"\n',
            "name missing",
        ),
        ('name = "p"\nbootstrap_servers = "b"\n[[jobs]]\ncheckpoint = "/a"\n', "jobs: expected"),
        (GOOD.replace("timeout = 30", "timeout = -1"), "timeout = -1"),
        (GOOD.replace("timeout = 30", "timout = 30"), "unknown key timout"),
        (GOOD.replace('reads = ["raw"]', 'reads = "raw"'), "jobs[0].reads = 'raw'"),
        (GOOD.replace('reads = ["raw"]', 'read = ["raw"]'), "jobs[0]: unknown key read"),
        (GOOD.replace('"s3://b/chk/count"', '"s3://b/chk/enrich"'), "jobs[0] and jobs[1]"),
        (GOOD.replace('checkpoint = "s3://b/chk/count"', "checkpoint = 3"), "jobs[1].checkpoint"),
        ("name = [", "not valid TOML"),
    ],
)
def test_bad_files_get_one_error_naming_the_file_and_the_key(
    tmp_path: Path, text: str, names: str
) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    with pytest.raises(SavepointError, match=r"pipeline file .*pipeline\.toml") as caught:
        load_pipeline_file(path=str(path))
    assert names in str(caught.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SavepointError, match=r"nope\.toml: cannot be read"):
        load_pipeline_file(path=str(tmp_path / "nope.toml"))


def test_declared_topics_that_the_checkpoints_contradict_are_refused_by_job() -> None:
    declared = [
        DeclaredJob(checkpoint="/a", reads=frozenset({"raw"}), writes=frozenset({"mid"})),
        DeclaredJob(checkpoint="/b", reads=frozenset({"mid"}), writes=frozenset()),
    ]
    check_declared(declared, [("a", {"raw"}, {"mid"}), ("b", {"mid"}, set())], path="p.toml")
    with pytest.raises(SavepointError) as caught:
        check_declared(
            declared, [("a", {"raw"}, {"other"}), ("b", {"mid", "x"}, set())], path="p.toml"
        )
    message = str(caught.value)
    assert "job a (/a) writes [other] by its checkpoint, the file says [mid]" in message
    assert "job b (/b) reads [mid, x] by its checkpoint, the file says [mid]" in message
    assert "Nothing was written" in message


def test_undeclared_topics_are_not_checked() -> None:
    check_declared(
        [DeclaredJob(checkpoint="/a"), DeclaredJob(checkpoint="/b")],
        [("a", {"raw"}, {"mid"}), ("b", {"mid"}, set())],
        path="p.toml",
    )


def test_a_file_without_a_savepoint_dir_needs_dir(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(GOOD)
    with pytest.raises(SavepointError, match="no savepoint_dir in the file and no --dir"):
        create_pipeline_savepoint_from_file(path=str(path))


def test_the_top_must_be_a_table() -> None:
    with pytest.raises(SavepointError, match="expected a table of keys"):
        parse_pipeline([1, 2], path="p.json")
