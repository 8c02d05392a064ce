"""A pipeline savepoint restored: every job's restore checked first, then the jobs
restored upstream first, rewound or forked into new topics and tables
(:mod:`spark_chkpt.savepoint.pipeline.fork`)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

from spark_chkpt.errors import ChkptError, SavepointError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.fs import qualify
from spark_chkpt.savepoint.pipeline.fork import ForkPlan, plan_fork, prepare_topics
from spark_chkpt.savepoint.pipeline.manifest import (
    PipelineJob,
    PipelineManifest,
    load_pipeline,
)
from spark_chkpt.savepoint.restore import RestoreMode, RestoreResult, restore_savepoint
from spark_chkpt.sinks import sink_kind


def restore_pipeline(
    *,
    pipeline: str,
    checkpoint_dir: str,
    mode: RestoreMode,
    kafka_bootstrap_servers: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    rename_topics: Mapping[str, str] | None = None,
    table_paths: Sequence[str] = (),
) -> list[RestoreResult]:
    """Restore every job of the pipeline savepoint at ``pipeline`` into
    ``<checkpoint_dir>/<job name>``: every job checked first (nothing written if one
    fails, naming it), then restored, upstream first. A fork
    (:mod:`spark_chkpt.savepoint.pipeline.fork`) writes new topics (``rename_topics``,
    old -> new, every Kafka sink topic) and new tables (``table_paths``: ``JOB=PATH``, or
    ``PATH`` when one job writes a table)."""
    point = load_pipeline(location=pipeline)
    order = _upstream_first(point.manifest)
    fork: ForkPlan | None = None
    if mode == "fork":
        fork = plan_fork(
            pipeline_id=point.manifest.pipeline_id,
            pipeline=point.manifest.name,
            savepoints={j.name: point.savepoint_of(j) for j in order},
            checkpoints={j.name: j.checkpoint for j in order},
            checkpoint_dir=checkpoint_dir,
            rename_topics=dict(rename_topics or {}),
            table_paths=table_paths,
            bootstrap_servers=kafka_bootstrap_servers,
        )
    elif rename_topics or table_paths:
        raise SavepointError(
            "--rename-topic and --table-path name a fork's topics and tables: a rewind "
            "writes the pipeline's own (use them with --mode fork)"
        )
    reads = {
        j.name: sorted({x.topic for x in point.manifest.joins if x.downstream == j.name})
        for j in order
    }

    # A fork: the app id each forked writer writes its new topic under, where it is not
    # the old one (a writer without txnAppId is its query id, new in a fork); known once
    # the writer is restored, before its readers (upstream first).
    forked_apps: dict[str, str] = {}

    def restore(job: PipelineJob, *, check_only: bool) -> RestoreResult:
        kafka_rewind = mode == "rewind" and sink_kind(job.sink).has_barriers
        return restore_savepoint(
            savepoint=point.savepoint_of(job),
            checkpoint_location=posixpath.join(qualify(checkpoint_dir), job.name),
            mode=mode,
            table=fork.tables.get(job.name) if fork is not None else None,
            storage_options=storage_options,
            kafka_bootstrap_servers=kafka_bootstrap_servers if kafka_rewind else None,
            check_only=check_only,
            source_rewrite=(
                fork.rewrite_for(reads[job.name], apps=forked_apps) if fork is not None else None
            ),
        )

    refused = []
    for job in order:
        try:
            restore(job, check_only=True)
        except ChkptError as e:
            refused.append(f"job {job.name} ({job.savepoint}): {e}")
    if refused:
        raise SavepointError(
            f"pipeline {point.manifest.name}: {len(refused)} of {len(order)} job(s) cannot "
            "be restored; nothing was changed. " + " | ".join(refused)
        )
    if fork is not None:
        fork = prepare_topics(
            fork, checkpoint_dir=checkpoint_dir, bootstrap_servers=kafka_bootstrap_servers
        )
    results = []
    for i, job in enumerate(order):
        result = restore(job, check_only=False)
        results.append(result)
        if fork is not None and sink_kind(job.sink).has_barriers and job.app_id == job.query_id:
            forked_apps[job.app_id] = result.query_id
        failpoint(FaultPoint.IN_PIPELINE_RESTORE, i)
    return results


def _upstream_first(manifest: PipelineManifest) -> list[PipelineJob]:
    downstream = {j.downstream for j in manifest.joins}
    order = [j for j in manifest.jobs if j.name not in downstream]
    while len(order) < len(manifest.jobs):
        done = {j.name for j in order}
        ready = [
            j
            for j in manifest.jobs
            if j.name not in done
            and all(x.upstream in done for x in manifest.joins if x.downstream == j.name)
        ]
        if not ready:
            raise SavepointError(f"pipeline {manifest.name}: its joins form a cycle")
        order += ready
    return order
