"""The pure parts of a pipeline fork (spark_chkpt.savepoint.pipeline.fork): the rename
options, where the forked downstream job starts on a new topic, which job gets which new
table, and the refusals that need no broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.errors import SavepointError
from spark_chkpt.savepoint.manifest import SavepointManifest, SinkInfo
from spark_chkpt.savepoint.pipeline.fork import ForkPlan, _tables, pairs, plan_fork
from spark_chkpt.savepoint.restore import RestoreResult


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


FAN_IN_PLAN = ForkPlan(
    pipeline_id="p",
    topics={"mid": "mid2"},
    partitions={"mid2": 2},
    tables={},
    starts={"mid2": {"0": 0, "1": 0}},
)


def fan_in_cut(**apps: dict[str, object]) -> dict[str, object]:
    return {
        "mid": {"0": 40, "1": 37},
        "__chkpt__": {"topics": {"mid": {"mode": "aligned", "apps": apps}}},
    }


def test_a_fan_in_readers_apps_start_at_the_new_topics_first_offsets() -> None:
    """Fan-in into one topic: the forked reader's report keeps, per app, where that app's
    records are pending. At the cut those are offsets in the old topic (each app right
    after its barrier); in the new topic both forked writers start at its first offsets,
    so every app's pending offsets are those, or the reader would skip what they wrote
    below the old ones."""
    a1 = {"snapshots": [3], "from": {"0": 20, "1": 18}, "pending": {"0": 40, "1": 37}}
    a2 = {"snapshots": [], "from": {"0": 25, "1": 30}, "pending": {"0": 25, "1": 30}}
    rewrite = FAN_IN_PLAN.rewrite_for(["mid"])
    assert rewrite is not None
    new = rewrite(fan_in_cut(a1=a1, a2=a2))
    starts = {"0": 0, "1": 0}
    assert new["mid2"] == starts and "mid" not in new
    assert new["__chkpt__"]["topics"]["mid2"] == {
        "mode": "aligned",
        "apps": {
            "a1": {"snapshots": [3], "from": starts, "pending": starts},
            "a2": {"snapshots": [], "from": starts, "pending": starts},
        },
    }


def test_a_writer_without_txn_app_id_is_named_by_its_forked_query_id() -> None:
    """A writer whose app id was its query id (no txnAppId) writes the new topic under its
    forked query id: the forked reader's report tracks that app, not the old one (which
    never writes the new topic: its pending offsets would hold every batch back)."""
    app = {"snapshots": [3], "from": {"0": 20, "1": 18}, "pending": {"0": 40, "1": 37}}
    rewrite = FAN_IN_PLAN.rewrite_for(["mid"], apps={"q1": "q1-fork"})
    assert rewrite is not None
    reports = rewrite(fan_in_cut(q1=app, a2=app))["__chkpt__"]["topics"]["mid2"]
    assert set(reports["apps"]) == {"q1-fork", "a2"}
    # A single-app report names its app too.
    single = {"mid": {"0": 4}, "__chkpt__": {"topics": {"mid": {"app": "q1", "snapshots": [3]}}}}
    assert rewrite(single)["__chkpt__"]["topics"]["mid2"] == {"app": "q1-fork", "snapshots": [3]}


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


def test_a_topic_two_jobs_write_is_refused_unrenamed_naming_both(tmp_path: Path) -> None:
    folders = {}
    for m in (
        manifest("a1", {"raw1": {"0": 1}}, "chkpt-kafka", "mid"),
        manifest("a2", {"raw2": {"0": 1}}, "chkpt-kafka", "mid"),
        manifest("b", {"mid": {"0": 1}}, "chkpt-delta", str(tmp_path / "table")),
    ):
        folder = tmp_path / "sp" / m.query_id
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(m.to_json())
        folders[m.query_id] = str(folder)
    with pytest.raises(SavepointError, match=r"rename mid \(written by jobs a1, a2\)"):
        plan_fork(
            pipeline_id="p",
            pipeline="p",
            savepoints=folders,
            checkpoints={n: str(tmp_path / f"chk-{n}") for n in folders},
            checkpoint_dir=str(tmp_path / "fork"),
            rename_topics={},
            table_paths=[str(tmp_path / "table2")],
            bootstrap_servers=None,
        )


def test_a_fork_gives_the_reader_the_forked_app_id_of_each_writer_without_txn_app_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """restore_pipeline restores the writers first; a writer whose app id is its query id
    (A1, no txnAppId) writes the fork under its new query id, which the reader's rewritten
    report then tracks; A2's txnAppId stays. The restores are stubbed: this is the
    wiring between them."""
    from spark_chkpt.savepoint.pipeline import manifest as pm
    from spark_chkpt.savepoint.pipeline import restore as pipe

    jobs = [
        pm.PipelineJob(name="a1", checkpoint="/chk/a1", savepoint="jobs/a1", batch_id=3,
                         query_id="q1", sink="chkpt-kafka", target="mid", app_id="q1"),
        pm.PipelineJob(name="a2", checkpoint="/chk/a2", savepoint="jobs/a2", batch_id=5,
                         query_id="q2", sink="chkpt-kafka", target="mid", app_id="fan-a2"),
        pm.PipelineJob(name="b", checkpoint="/chk/b", savepoint="jobs/b", batch_id=7,
                         query_id="q3", sink="chkpt-delta", target="/t", app_id="q3"),
    ]  # fmt: skip
    joins = [
        pm.Join(topic="mid", upstream=up, downstream="b", app_id=app, snapshot=n,
                  downstream_batch=7, offsets={"0": 40})
        for up, app, n in (("a1", "q1", 3), ("a2", "fan-a2", 5))
    ]  # fmt: skip
    folder = tmp_path / "sp"
    folder.mkdir()
    manifest = pm.PipelineManifest(name="fan", pipeline_id="p", jobs=jobs, joins=joins)
    (folder / pm.PIPELINE_MANIFEST).write_text(manifest.to_json())
    plan = ForkPlan(pipeline_id="p", topics={"mid": "mid2"}, partitions={"mid2": 1},
                    tables={"b": "/t2"}, starts={"mid2": {"0": 0}})  # fmt: skip
    monkeypatch.setattr(pipe, "plan_fork", lambda **_: plan)
    monkeypatch.setattr(pipe, "prepare_topics", lambda p, **_: p)
    restored: list[str] = []
    rewrites: dict[str, Any] = {}

    def restore_savepoint(**kw: Any) -> RestoreResult:
        name = kw["checkpoint_location"].rsplit("/", 1)[-1]
        if not kw["check_only"]:
            restored.append(name)
            rewrites[name] = kw["source_rewrite"]
        return RestoreResult(
            checkpoint_location=kw["checkpoint_location"],
            mode="fork",
            savepoint=kw["savepoint"],
            query_id=f"{name}-fork",
            resumes_at=1,
        )

    monkeypatch.setattr(pipe, "restore_savepoint", restore_savepoint)
    pipe.restore_pipeline(
        pipeline=str(folder), checkpoint_dir=str(tmp_path / "fork"), mode="fork",
        kafka_bootstrap_servers="broker:9092", rename_topics={"mid": "mid2"},
    )  # fmt: skip
    assert restored == ["a1", "a2", "b"] and rewrites["a1"] is None
    app = {"snapshots": [3], "from": {"0": 40}, "pending": {"0": 40}}
    cut = {"mid": {"0": 40}, "__chkpt__": {"topics": {"mid": {"apps": {"q1": app, "fan-a2": app}}}}}
    report = rewrites["b"](cut)["__chkpt__"]["topics"]["mid2"]
    assert set(report["apps"]) == {"a1-fork", "fan-a2"}, report


def test_a_renamed_topics_report_leaves_its_index_offset_behind() -> None:
    """``index_from`` is an offset in the old topic's control topic: carried onto the new
    topic, the forked reader would seek the new control topic past its first entries."""
    rewrite = FAN_IN_PLAN.rewrite_for(["mid"])
    assert rewrite is not None
    cut = {
        "mid": {"0": 40, "1": 37},
        "other": {"0": 5},
        "__chkpt__": {
            "topics": {
                "mid": {"mode": "aligned", "snapshots": [3], "index_from": 3},
                "other": {"mode": "aligned", "snapshots": [1], "index_from": 7},
            }
        },
    }
    assert rewrite(cut)["__chkpt__"]["topics"] == {
        "mid2": {"mode": "aligned", "snapshots": [3]},
        "other": {"mode": "aligned", "snapshots": [1], "index_from": 7},
    }
