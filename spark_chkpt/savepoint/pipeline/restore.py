"""A pipeline savepoint restored: every job's restore checked first, then the jobs
restored upstream first, rewound or forked into new topics and tables
(:mod:`spark_chkpt.savepoint.pipeline.fork`)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence

from spark_chkpt.errors import ChkptError, SavepointError
from spark_chkpt.failpoints import FaultPoint, failpoint
from spark_chkpt.fs import qualify
from spark_chkpt.savepoint.pipeline.fork import ForkPlan, plan_fork, prepare_topics
from spark_chkpt.savepoint.pipeline.manifest import (
    Pipeline,
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
    sink_options: Mapping[str, Mapping[str, str]] | None = None,
) -> list[RestoreResult]:
    """Restore every job of the pipeline savepoint at ``pipeline`` into
    ``<checkpoint_dir>/<job name>``: every job checked first (nothing written if one
    fails, naming it), then restored, upstream first, each with its ``sink_options``
    (by job name). A fork (:mod:`spark_chkpt.savepoint.pipeline.fork`) writes new topics
    (``rename_topics``, old -> new, every Kafka sink topic) and new tables
    (``table_paths``: ``JOB=PATH``, or ``PATH`` when one job writes a table)."""
    point = load_pipeline(location=pipeline)
    order = _upstream_first(point.manifest)
    options = _options_by_job(point.manifest.name, order, sink_options)
    fork = _fork_plan(
        point,
        order,
        mode=mode,
        checkpoint_dir=checkpoint_dir,
        rename_topics=rename_topics,
        table_paths=table_paths,
        bootstrap_servers=kafka_bootstrap_servers,
    )
    reads = _reads(point.manifest, order)

    # A fork: each forked writer's new app id, known once it is restored (_restore_every_job)
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
            sink_options=options.get(job.name),
            check_only=check_only,
            source_rewrite=(
                fork.rewrite_for(reads[job.name], apps=forked_apps) if fork is not None else None
            ),
        )

    _check_every_job(point.manifest.name, order, check=lambda job: restore(job, check_only=True))
    if fork is not None:
        fork = prepare_topics(
            fork, checkpoint_dir=checkpoint_dir, bootstrap_servers=kafka_bootstrap_servers
        )
    return _restore_every_job(
        order,
        restore=lambda job: restore(job, check_only=False),
        forked_apps=forked_apps if fork is not None else None,
    )


def _options_by_job(
    name: str, order: Sequence[PipelineJob], sink_options: Mapping[str, Mapping[str, str]] | None
) -> dict[str, Mapping[str, str]]:
    """Each job's sink options by its name; a name the pipeline lacks is refused."""
    options = dict(sink_options or {})
    unknown = sorted(set(options) - {j.name for j in order})
    if unknown:
        raise SavepointError(
            f"pipeline {name} has no job {', '.join(unknown)} (--sink-option): its jobs "
            f"are {', '.join(j.name for j in order)}"
        )
    return options


def _fork_plan(
    point: Pipeline,
    order: Sequence[PipelineJob],
    *,
    mode: RestoreMode,
    checkpoint_dir: str,
    rename_topics: Mapping[str, str] | None,
    table_paths: Sequence[str],
    bootstrap_servers: str | None,
) -> ForkPlan | None:
    """A fork's new topics and tables, checked (None for a rewind, which refuses them)."""
    if mode == "fork":
        return plan_fork(
            pipeline_id=point.manifest.pipeline_id,
            pipeline=point.manifest.name,
            savepoints={j.name: point.savepoint_of(j) for j in order},
            checkpoints={j.name: j.checkpoint for j in order},
            checkpoint_dir=checkpoint_dir,
            rename_topics=dict(rename_topics or {}),
            table_paths=table_paths,
            bootstrap_servers=bootstrap_servers,
        )
    if rename_topics or table_paths:
        raise SavepointError(
            "--rename-topic and --table-path name a fork's topics and tables: a rewind "
            "writes the pipeline's own (use them with --mode fork)"
        )
    return None


def _check_every_job(
    name: str, order: Sequence[PipelineJob], *, check: Callable[[PipelineJob], RestoreResult]
) -> None:
    """Every job's restore checked (nothing written); one error naming each refused job."""
    refused = []
    for job in order:
        try:
            check(job)
        except ChkptError as e:
            refused.append(f"job {job.name} ({job.savepoint}): {e}")
    if refused:
        raise SavepointError(
            f"pipeline {name}: {len(refused)} of {len(order)} job(s) cannot "
            "be restored; nothing was changed. " + " | ".join(refused)
        )


def _restore_every_job(
    order: Sequence[PipelineJob],
    *,
    restore: Callable[[PipelineJob], RestoreResult],
    forked_apps: dict[str, str] | None,
) -> list[RestoreResult]:
    """Every job restored, upstream first; in a fork, the app id each forked writer
    writes its new topic under, where it is not the old one (a writer without txnAppId
    is its query id, new in a fork), put in ``forked_apps`` before its readers are
    restored."""
    results = []
    for i, job in enumerate(order):
        result = restore(job)
        results.append(result)
        if (
            forked_apps is not None
            and sink_kind(job.sink).has_barriers
            and job.app_id == job.query_id
        ):
            forked_apps[job.app_id] = result.query_id
        failpoint(FaultPoint.IN_PIPELINE_RESTORE, i)
    return results


def _reads(manifest: PipelineManifest, order: Sequence[PipelineJob]) -> dict[str, list[str]]:
    """Each job's topics that an upstream job of the pipeline writes."""
    return {
        j.name: sorted({x.topic for x in manifest.joins if x.downstream == j.name}) for j in order
    }


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
