"""A pipeline savepoint created (steps 1 to 3 of :mod:`spark_chkpt.savepoint.pipeline`):
each job's checkpoint and its upstream topics' barrier index read, the cut found
(:mod:`spark_chkpt.savepoint.pipeline.cut`), every job savepointed at it and the
manifest written last."""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Mapping
from typing import Any

from spark_chkpt.alignment.barrier import IndexEntry, control_topic_for
from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import ChkptError, SavepointError
from spark_chkpt.fs import qualify
from spark_chkpt.kafka.control.topic import ControlTopic
from spark_chkpt.offsets import META_KEY
from spark_chkpt.savepoint.manifest import create_savepoint, discard_incomplete, new_folder
from spark_chkpt.savepoint.pipeline.cut import JobCheckpoint, find_cut, job_tree
from spark_chkpt.savepoint.pipeline.file import PipelineFile, check_declared, load_pipeline_file
from spark_chkpt.savepoint.pipeline.manifest import (
    JOBS,
    PIPELINE_MANIFEST,
    Join,
    Pipeline,
    PipelineJob,
    PipelineManifest,
)
from spark_chkpt.sinks import sink_kind
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.snapshot.store import SnapshotStore
from spark_chkpt.state.operators import committed_batches

log = logging.getLogger(__name__)


def _read_job(checkpoint: str, index: int) -> JobCheckpoint:
    location = qualify(checkpoint)
    spark = SparkCheckpoint(location=location)
    try:
        query_id = spark.query_id()
        batches = committed_batches(checkpoint_location=location)
    except ChkptError as e:
        raise SavepointError(f"job {checkpoint}: {e}") from e
    if not batches:
        raise SavepointError(f"job {checkpoint} has no committed batch yet")
    record = SnapshotStore(checkpoint_location=location).latest()
    writes: dict[str, str] = {}
    if record is not None:
        writes = {t: record.app_id for t in sink_kind(record.sink).barrier_topics(record.target)}
    ends: dict[int, dict[str, dict[int, int]]] = {}
    app_ends: dict[int, dict[str, dict[str, dict[int, int]]]] = {}
    for batch in batches:
        ends[batch] = {}
        for source in spark.plan(batch).sources:
            if isinstance(source, dict):
                for topic, parts in source.items():
                    if topic != META_KEY and isinstance(parts, dict):
                        ends[batch][topic] = {int(p): int(o) for p, o in parts.items()}
                fanned = _fan_in_pending(source)
                if fanned:
                    app_ends.setdefault(batch, {}).update(fanned)
    reads = {t for b in ends.values() for t in b}
    name = (
        (record.query_name if record is not None else None)
        or posixpath.basename(location.rstrip("/"))
        or f"job{index}"
    )
    return JobCheckpoint(
        name=name,
        checkpoint=location,
        query_id=query_id,
        reads=reads,
        writes=writes,
        batches=batches,
        ends=ends,
        app_ends=app_ends,
    )


def _fan_in_pending(source: Mapping[str, Any]) -> dict[str, dict[str, dict[int, int]]]:
    """topic -> app -> partition -> pending offset, from a fan-in batch's report."""
    meta = source.get(META_KEY)
    topics = meta.get("topics") if isinstance(meta, Mapping) else None
    found: dict[str, dict[str, dict[int, int]]] = {}
    for topic, report in (topics or {}).items():
        apps = report.get("apps") if isinstance(report, Mapping) else None
        if not isinstance(apps, Mapping):
            continue
        found[topic] = {
            str(app): {int(p): int(o) for p, o in (r.get("pending") or {}).items()}
            for app, r in apps.items()
            if isinstance(r, Mapping)
        }
    return found


def _live_completes(
    *, bootstrap_servers: str, topic: str, app_id: str, settings: Mapping[str, Any]
) -> dict[int, IndexEntry]:
    index = ControlTopic(
        bootstrap_servers=bootstrap_servers,
        control_topic=control_topic_for(topic),
        data_topic=topic,
        client_settings=settings,
        client_id="spark-chkpt-pipeline",
    )
    try:
        index.topic_id = index.current_topic_id()
        index.refresh()
        return {e.snapshot_id: e for e in index.complete(app_id=app_id)}
    finally:
        index.close()


def _distinct_names(jobs: list[JobCheckpoint]) -> list[JobCheckpoint]:
    """Jobs named by their query names, or, when two share one (the same program run
    twice), by their checkpoint folders' names."""
    if len({j.name for j in jobs}) == len(jobs):
        return jobs
    for job in jobs:
        job.name = posixpath.basename(job.checkpoint.rstrip("/")) or job.name
    return jobs


def create_pipeline_savepoint(
    *,
    name: str,
    checkpoints: list[str],
    savepoint_dir: str,
    bootstrap_servers: str,
    timeout_s: float = 0.0,
    client_settings: Mapping[str, Any] | None = None,
    declared: PipelineFile | None = None,
) -> Pipeline:
    """Savepoint the jobs at ``checkpoints`` at matching cuts; see the module docstring.
    ``timeout_s``: how long to wait for the downstream jobs to commit a batch that ends
    at a barrier of their upstream's (0: do not wait). ``declared``: the pipeline file
    that lists the jobs (in the order of ``checkpoints``); the topics it says each job
    reads and writes are checked against the checkpoints before anything is written."""
    if len(checkpoints) < 2:
        raise SavepointError("a pipeline savepoint needs at least two jobs (--job ... --job ...)")
    jobs, chosen, joins = _matching_cut(
        name,
        checkpoints,
        bootstrap_servers=bootstrap_servers,
        timeout_s=timeout_s,
        settings=dict(client_settings or {}),
        declared=declared,
    )
    # Step 3
    folder, final, work = new_folder(savepoint_dir, f"pipeline-{name}")
    work_uri = posixpath.join(qualify(savepoint_dir), work.path.rsplit("/", 1)[-1])
    try:
        parts = [
            _job_savepoint(
                job, savepoint_dir=posixpath.join(work_uri, JOBS), batch=chosen[job.name]
            )
            for job in jobs
        ]
        manifest = PipelineManifest(name=name, pipeline_id=folder, jobs=parts, joins=joins)
        work.child(PIPELINE_MANIFEST).write_atomic(manifest.to_json() + "\n")
        if work != final:
            work.fs.move(work.path, final.path)
    except BaseException:
        discard_incomplete(work, what="pipeline savepoint")
        raise
    log.info(
        "pipeline savepoint %s: %s",
        final,
        ", ".join(f"{j.name} at {j.batch_id}" for j in parts),
    )
    return Pipeline(location=posixpath.join(qualify(savepoint_dir), folder), manifest=manifest)


def _matching_cut(
    name: str,
    checkpoints: list[str],
    *,
    bootstrap_servers: str,
    timeout_s: float,
    settings: dict[str, Any],
    declared: PipelineFile | None,
) -> tuple[list[JobCheckpoint], dict[str, int], list[Join]]:
    """Steps 1 and 2, again while the downstream jobs have not reached a cut (until
    ``timeout_s``): the jobs read from their checkpoints, the batch each is cut at, and
    the joins between them."""
    deadline = Deadline.after(seconds=timeout_s)
    while True:
        jobs = _distinct_names([_read_job(c, i) for i, c in enumerate(checkpoints)])
        if declared is not None:
            check_declared(
                declared.jobs,
                [(j.name, j.reads, set(j.writes)) for j in jobs],
                path=declared.path,
            )
        root, edges = job_tree(jobs)
        barriers = {
            e.key: _live_completes(
                bootstrap_servers=bootstrap_servers,
                topic=e.topic,
                app_id=e.upstream.writes[e.topic],
                settings=settings,
            )
            for e in edges
        }
        found = find_cut(root, edges, barriers)
        if not isinstance(found, str):
            break
        if deadline.expired():
            raise SavepointError(
                f"pipeline {name}: no cut matches across the jobs"
                + (f" after waiting {timeout_s:.0f}s" if timeout_s else "")
                + f": {found}. Let the downstream jobs run (a batch of an aligned reader "
                "ends at a barrier; with maxOffsetsPerTrigger it may end at several "
                "snapshots at once, each batch then joins only its last one), or wait "
                "longer (--timeout). Nothing was written."
            )
        time.sleep(1.0)
    chosen, joins = found
    return jobs, chosen, joins


def _job_savepoint(job: JobCheckpoint, *, savepoint_dir: str, batch: int) -> PipelineJob:
    """One job's savepoint of ``batch`` under ``savepoint_dir``, as the pipeline's
    manifest lists it."""
    point = create_savepoint(
        checkpoint_location=job.checkpoint, savepoint_dir=savepoint_dir, batch_id=batch
    )
    sink = point.manifest.sink
    return PipelineJob(
        name=job.name,
        checkpoint=job.checkpoint,
        savepoint=f"{JOBS}/{point.manifest.savepoint_id}",
        batch_id=batch,
        query_id=job.query_id,
        sink=sink.kind if sink is not None else None,
        target=sink.target if sink is not None else None,
        app_id=sink.app_id if sink is not None else None,
    )


def create_pipeline_savepoint_from_file(
    *,
    path: str,
    savepoint_dir: str | None = None,
    bootstrap_servers: str | None = None,
    timeout_s: float | None = None,
    client_settings: Mapping[str, Any] | None = None,
) -> Pipeline:
    """:func:`create_pipeline_savepoint` of the jobs a pipeline file lists
    (:mod:`spark_chkpt.savepoint.pipeline.file`); the arguments given here win over the
    file's values."""
    spec = load_pipeline_file(path=path)
    directory = savepoint_dir or spec.savepoint_dir
    if not directory:
        raise SavepointError(
            f"pipeline file {path}: no savepoint_dir in the file and no --dir given: say "
            "where the pipeline savepoint goes"
        )
    return create_pipeline_savepoint(
        name=spec.name,
        checkpoints=spec.checkpoints,
        savepoint_dir=directory,
        bootstrap_servers=bootstrap_servers or spec.bootstrap_servers,
        timeout_s=timeout_s if timeout_s is not None else (spec.timeout_s or 0.0),
        client_settings=client_settings,
        declared=spec,
    )
