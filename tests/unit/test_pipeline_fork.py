"""The pure parts of a pipeline fork (spark_chkpt.savepoint.pipeline_fork): the rename
options, where the forked downstream job starts on a new topic, which job gets which new
table, and the refusals that need no broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_chkpt.errors import SavepointError
from spark_chkpt.savepoint.manifest import SavepointManifest, SinkInfo
from spark_chkpt.savepoint.pipeline_fork import ForkPlan, _tables, pairs, plan_fork


def manifest(
    name: str, reads: dict[str, dict[str, int]], kind: str, target: str
) -> SavepointManifest:
    return SavepointManifest(
        savepoint_id=f"sp-{name}",
        batch_id=3,
        query_id=name,
        query_name=name,
        checkpoint=f"/chk/{name}",
        source_offsets=[reads],
        sink=SinkInfo(kind=kind, target=target, table_version=None, mode=None, app_id=name),
        provider=None,
        state_version=None,
        operators=[],
        files=[],
        versions={},
    )


def test_rename_options_are_old_equals_new() -> None:
    assert pairs(["mid=mid2", " t2 = t2f "], option="--rename-topic") == {
        "mid": "mid2",
        "t2": "t2f",
    }
    with pytest.raises(SavepointError, match="--rename-topic 'mid': give OLD=NEW"):
        pairs(["mid"], option="--rename-topic")
    with pytest.raises(SavepointError, match="mid is renamed twice"):
        pairs(["mid=a", "mid=b"], option="--rename-topic")


def test_the_forked_downstream_starts_at_the_new_topics_first_offsets() -> None:
    plan = ForkPlan(
        pipeline_id="p",
        topics={"mid": "mid2", "out": "out2"},
        partitions={"mid2": 2, "out2": 1},
        tables={},
        starts={"mid2": {"0": 0, "1": 0}, "out2": {"0": 0}},
    )
    assert plan.rewrite_for(["raw"]) is None  # reads no renamed topic: left as it is
    rewrite = plan.rewrite_for(["mid"])
    assert rewrite is not None
    cut = {
        "mid": {"0": 40, "1": 37},  # barrier N + 1 in the old topic: nothing in the new one
        "other": {"0": 5},
        "__chkpt__": {"topics": {"mid": {"mode": "aligned", "snapshots": [3]}}},
    }
    assert rewrite(cut) == {
        "mid2": {"0": 0, "1": 0},
        "other": {"0": 5},
        "__chkpt__": {"topics": {"mid2": {"mode": "aligned", "snapshots": [3]}}},
    }
    assert rewrite(None) is None  # a source without offsets ("-")


def test_each_job_writing_a_table_gets_one() -> None:
    jobs = {
        "a": manifest("a", {"raw": {"0": 1}}, "chkpt-kafka", "mid"),
        "b": manifest("b", {"mid": {"0": 1}}, "chkpt-delta", "/data/t"),
    }
    assert _tables(jobs, ["/data/fork"], "p") == {"b": "/data/fork"}
    assert _tables(jobs, ["b=/data/fork"], "p") == {"b": "/data/fork"}
    with pytest.raises(SavepointError, match="give --table-path for job\\(s\\) b"):
        _tables(jobs, [], "p")
    with pytest.raises(SavepointError, match="job a writes Kafka \\(mid\\)"):
        _tables(jobs, ["a=/data/x", "b=/data/y"], "p")


def test_a_fork_touching_production_is_refused_before_any_broker_is_asked(tmp_path: Path) -> None:
    folders = {}
    for m in (
        manifest("a", {"raw": {"0": 1}}, "chkpt-kafka", "mid"),
        manifest("b", {"mid": {"0": 1}}, "chkpt-delta", str(tmp_path / "table")),
    ):
        folder = tmp_path / "sp" / m.query_id
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(m.to_json())
        folders[m.query_id] = str(folder)

    def fork(**kw: object) -> ForkPlan:
        args: dict[str, object] = {
            "pipeline_id": "p",
            "pipeline": "p",
            "savepoints": folders,
            "checkpoints": {"a": str(tmp_path / "chk-a"), "b": str(tmp_path / "chk-b")},
            "checkpoint_dir": str(tmp_path / "fork"),
            "rename_topics": {"mid": "mid2"},
            "table_paths": [str(tmp_path / "table2")],
            "bootstrap_servers": None,
        }
        return plan_fork(**{**args, **kw})  # type: ignore[arg-type]

    with pytest.raises(SavepointError, match="is job a's checkpoint"):
        fork(checkpoint_dir=str(tmp_path / "chk-a" / "fork"))
    with pytest.raises(SavepointError, match="rename mid \\(written by job a\\)"):
        fork(rename_topics={})
    with pytest.raises(SavepointError, match="raw is a topic of the pipeline"):
        fork(rename_topics={"mid": "raw"})
    with pytest.raises(SavepointError, match=r"__chkpt\.x is a control topic"):
        fork(rename_topics={"mid": "__chkpt.x"})
    with pytest.raises(SavepointError, match="no job of pipeline p writes topic raw"):
        fork(rename_topics={"mid": "mid2", "raw": "raw2"})
    with pytest.raises(SavepointError, match="it is job b's table"):
        fork(table_paths=[str(tmp_path / "table")])
    with pytest.raises(SavepointError, match="give the brokers with --bootstrap-servers"):
        fork()
