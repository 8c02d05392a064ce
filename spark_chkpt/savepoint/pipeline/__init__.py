"""Pipeline savepoints: one savepoint per job of a pipeline joined by chkpt-kafka topics,
at cuts that match through the barriers, restored together.

A job that writes a topic with the ``chkpt-kafka`` sink completes snapshot N as barrier
N on every partition; a job reading that topic aligned ends a batch right after barrier
N on every partition. So upstream snapshot N and the downstream batch M whose end
offsets are barrier N's offsets + 1 on every partition are one consistent cut of both
jobs: nothing in flight between them. :func:`create_pipeline_savepoint`:

1. reads each job's checkpoint: the topics it reads (its offsets), the topic it writes
   and its app id (its snapshot records), its committed batches; the jobs form a tree
   (fan-out and a job reading the topics of several listed jobs allowed; so is fan-in,
   two jobs writing one topic: its aligned reader cuts it per app, and each batch's
   report holds each app's pending offsets, :mod:`spark_chkpt.alignment.fanin`, which
   join that app's snapshot as a single app's end offsets do);
2. finds the newest snapshot N of the upstream job (the root) such that every
   downstream job has a committed batch ending at the barrier of its upstream's chosen
   snapshot (and a job reading several upstream jobs' topics, a batch ending at a
   barrier of each: :func:`find_cut`), reading the barrier offsets from the topic's
   control topic index (live entries only: a revoked snapshot never joins); if there
   is none, it waits (up to ``timeout_s``) for the downstream jobs to commit one, then
   says which job lacks it;
3. savepoints every job at its batch into ``jobs/`` of a hidden in-progress folder,
   then writes the pipeline manifest (``pipeline.json``: each job's savepoint, and the
   joins: topic, upstream app and barrier id, downstream batch, offsets) and publishes
   the folder. On object stores (no rename) it writes in place, manifest last. Either
   way an interrupted run leaves no folder with a manifest: nothing ``list`` shows.

:func:`restore_pipeline` checks every job's restore first (without writing) and refuses,
naming the job and the reason, before changing anything; then restores the jobs,
upstream first, each into ``<checkpoint_dir>/<job>``. A rewind of a job that writes
Kafka revokes its snapshots after N (:mod:`spark_chkpt.kafka.sink.rewind`), so the
restored downstream job reads each record of the new timeline once. A fork restores
every job as a new query into new topics and tables, the downstream jobs starting at
the new topics' first offsets (:mod:`spark_chkpt.savepoint.pipeline.fork`).

(Over 400 lines: the manifest's dataclasses, the search for the cut across the jobs'
checkpoints and the barrier index, and create / load / list / restore of one pipeline
belong together; one job's savepoint and restore stay in their own modules.)
"""

from __future__ import annotations

import json
import logging
import posixpath
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from spark_chkpt.alignment.barrier import IndexEntry, control_topic_for
from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import ChkptError, SavepointError
from spark_chkpt.fs import qualify, resolve
from spark_chkpt.kafka.sink.control_topic import ControlTopic
from spark_chkpt.offsets import META_KEY
from spark_chkpt.savepoint.manifest import IN_PROGRESS, create_savepoint
from spark_chkpt.savepoint.pipeline.file import PipelineFile, check_declared, load_pipeline_file
from spark_chkpt.savepoint.pipeline.fork import ForkPlan, plan_fork, prepare_topics
from spark_chkpt.savepoint.restore import RestoreMode, RestoreResult, restore_savepoint
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.snapshot.store import SnapshotStore
from spark_chkpt.state.operators import committed_batches
from spark_chkpt.testing.failpoints import FaultPoint, failpoint

log = logging.getLogger(__name__)

PIPELINE_MANIFEST = "pipeline.json"
JOBS = "jobs"
FORMAT = 1


@dataclass(frozen=True)
class PipelineJob:
    """One job's part of a pipeline savepoint; ``savepoint`` is relative to the
    pipeline's folder."""

    name: str
    checkpoint: str
    savepoint: str
    batch_id: int
    query_id: str
    sink: str | None
    target: str | None
    app_id: str | None


@dataclass(frozen=True)
class Join:
    """Upstream snapshot ``snapshot`` (barrier ``(app_id, snapshot)`` in ``topic``) and
    the downstream batch that ends right after it: ``offsets``, partition -> offset."""

    topic: str
    upstream: str
    downstream: str
    app_id: str
    snapshot: int
    downstream_batch: int
    offsets: dict[str, int]


@dataclass(frozen=True)
class PipelineManifest:
    """What a pipeline savepoint holds (``pipeline.json``), written last."""

    name: str
    pipeline_id: str
    jobs: list[PipelineJob]
    joins: list[Join]
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    format: int = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PipelineManifest:
        doc = json.loads(text)
        return cls(
            name=doc["name"],
            pipeline_id=doc["pipeline_id"],
            jobs=[PipelineJob(**j) for j in doc["jobs"]],
            joins=[Join(**j) for j in doc["joins"]],
            created_ms=int(doc["created_ms"]),
            format=int(doc.get("format", FORMAT)),
        )


@dataclass(frozen=True)
class Pipeline:
    location: str
    manifest: PipelineManifest

    def savepoint_of(self, job: PipelineJob) -> str:
        return posixpath.join(self.location, job.savepoint)


@dataclass
class JobCheckpoint:
    """What step 1 reads of one job's checkpoint."""

    name: str
    checkpoint: str
    query_id: str
    reads: set[str]
    writes: dict[str, str]  # topic -> app id (a chkpt-kafka sink)
    batches: list[int]
    ends: dict[int, dict[str, dict[int, int]]]  # batch -> topic -> partition -> end
    # A topic several apps write (fan-in): batch -> topic -> app -> partition -> the
    # app's pending offset after the batch (right after its last delivered barrier).
    app_ends: dict[int, dict[str, dict[str, dict[int, int]]]] = field(default_factory=dict)

    def end_of(self, batch: int, topic: str, app_id: str) -> dict[int, int] | None:
        """Where batch ``batch`` left app ``app_id``'s records in ``topic``: its pending
        offsets on a fan-in topic, else the batch's end offsets."""
        found = self.app_ends.get(batch, {}).get(topic, {}).get(app_id)
        return found if found is not None else self.ends[batch].get(topic)


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
    if record is not None and record.sink == "chkpt-kafka" and record.target:
        writes = {t: record.app_id for t in record.target.split(",")}
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


@dataclass(frozen=True)
class Edge:
    topic: str
    upstream: JobCheckpoint
    downstream: JobCheckpoint
    shared: bool = False  # another job writes the topic too (fan-in)

    @property
    def key(self) -> str:
        """The key of this edge's barrier entries: the topic, or with fan-in the topic
        and the upstream's app id (a space: no topic name holds one)."""
        return f"{self.topic} {self.upstream.writes[self.topic]}" if self.shared else self.topic


def job_tree(jobs: list[JobCheckpoint]) -> tuple[JobCheckpoint, list[Edge]]:
    """The root job and the edges (upstream writes the topic the downstream reads)."""
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise SavepointError(f"two jobs share a query name ({', '.join(names)}): name them apart")
    writers: dict[str, list[JobCheckpoint]] = {}
    for job in jobs:
        for topic in sorted(job.writes):
            for first in writers.get(topic, []):
                if first.writes[topic] == job.writes[topic]:
                    raise SavepointError(
                        f"topic {topic} is written by jobs {first.name} and {job.name} "
                        f"under one app id {job.writes[topic]}: their barriers cannot be "
                        "told apart; give each its own txnAppId"
                    )
            writers.setdefault(topic, []).append(job)
    # Fan-in (several jobs write one topic): one edge per writer; the reader's batches
    # hold each app's pending offsets (alignment.fanin), which the cut joins per app.
    edges = [
        Edge(topic=t, upstream=w, downstream=job, shared=len(writers[t]) > 1)
        for job in jobs
        for t in sorted(job.reads)
        for w in writers.get(t, [])
        if w is not job
    ]
    groups = _components(jobs, edges)
    if len(groups) != 1:
        raise SavepointError(
            f"the jobs form {len(groups)} pipelines ("
            + "; ".join(", ".join(j.name for j in g) for g in groups)
            + "): no chkpt-kafka topic joins them; list the jobs of one pipeline joined by "
            "chkpt-kafka topics"
        )
    roots = [j for j in jobs if not any(e.downstream is j for e in edges)]
    if not roots:
        raise SavepointError(
            f"the jobs ({', '.join(names)}) read each other's topics in a cycle: a pipeline "
            "savepoint needs a first job that reads no topic of the others"
        )
    return roots[0], edges


def _components(jobs: list[JobCheckpoint], edges: list[Edge]) -> list[list[JobCheckpoint]]:
    """The jobs in groups joined by edges (either way)."""
    groups: list[list[JobCheckpoint]] = []
    seen: set[int] = set()
    for first in jobs:
        if id(first) in seen:
            continue
        group, pending = [], [first]
        seen.add(id(first))
        while pending:
            job = pending.pop()
            group.append(job)
            for e in edges:
                for a, b in ((e.upstream, e.downstream), (e.downstream, e.upstream)):
                    if a is job and id(b) not in seen:
                        seen.add(id(b))
                        pending.append(b)
        groups.append(group)
    return groups


def find_cut(
    root: JobCheckpoint,
    edges: list[Edge],
    barriers: Mapping[str, dict[int, IndexEntry]],
) -> tuple[dict[str, int], list[Join]] | str:
    """The newest cut (job -> batch, and the joins), or why there is none.

    Every edge maps one upstream snapshot to at most one downstream batch (the one that
    ends right after its barrier on every partition) and back, so choosing the root's
    batch fixes every job's: the search tries the root's batches newest first and
    follows the edges both ways (down from an upstream's snapshot to the batch that ends
    at its barrier; up from a downstream's batch to the snapshot whose barrier it ends
    at, for a job that reads the topics of two upstream jobs). A job reached twice must
    get the same batch both times."""
    why = ""
    for n in reversed(root.batches):
        found = _propagate(root, n, edges, barriers)
        if not isinstance(found, str):
            return found
        why = why or found  # the newest snapshot's reason
    return why


def _propagate(
    root: JobCheckpoint,
    n: int,
    edges: list[Edge],
    barriers: Mapping[str, dict[int, IndexEntry]],
) -> tuple[dict[str, int], list[Join]] | str:
    chosen = {root.name: n}
    joins: dict[int, Join] = {}
    pending = [root]
    while pending:
        job = pending.pop()
        for i, edge in enumerate(edges):
            if i in joins or (job is not edge.upstream and job is not edge.downstream):
                continue
            up, down = edge.upstream, edge.downstream
            index = barriers[edge.key]
            app = up.writes[edge.topic]
            if job is up:
                entry = index.get(chosen[up.name])
                if entry is None:
                    return (
                        f"snapshot {chosen[up.name]} of job {up.name} has no barriers in "
                        f"{edge.topic} (the control topic holds no live complete entry)"
                    )
                target = {p: o + 1 for p, o in entry.positions.items()}
                batches = [b for b in down.batches if down.end_of(b, edge.topic, app) == target]
                if not batches:
                    newest = down.batches[-1]
                    return (
                        f"job {down.name} ({down.checkpoint}) has no committed batch that "
                        f"ends at barrier {entry.snapshot_id} of app {entry.app_id} in "
                        f"{edge.topic} (offsets {json.dumps(target)}); its newest committed "
                        f"batch {newest} ends at "
                        f"{json.dumps(down.end_of(newest, edge.topic, app) or {})}"
                    )
                batch, other = batches[0], down
            else:
                target = dict(down.end_of(chosen[down.name], edge.topic, app) or {})
                hits = [
                    e
                    for e in index.values()
                    if {p: o + 1 for p, o in e.positions.items()} == target
                    and e.snapshot_id in up.batches
                ]
                if not hits:
                    return (
                        f"batch {chosen[down.name]} of job {down.name} ends in {edge.topic} "
                        f"at {json.dumps(target)}, right after no live barrier of a "
                        f"committed snapshot of job {up.name} ({up.checkpoint})"
                    )
                entry = hits[0]
                batch, other = entry.snapshot_id, up
            if chosen.setdefault(other.name, batch) != batch:
                return (
                    f"job {other.name} would be cut at batch {chosen[other.name]} and at "
                    f"{batch} (through {edge.topic}): its upstream jobs' snapshots do not "
                    "meet at one of its batches"
                )
            joins[i] = Join(
                topic=edge.topic,
                upstream=up.name,
                downstream=down.name,
                app_id=entry.app_id,
                snapshot=entry.snapshot_id,
                downstream_batch=chosen[down.name],
                offsets={str(p): o for p, o in sorted(target.items())},
            )
            pending.append(other)
    return chosen, [joins[i] for i in sorted(joins)]


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
    settings = dict(client_settings or {})
    deadline = Deadline.after(seconds=timeout_s)
    # Steps 1 and 2, again while the downstream jobs have not reached a cut.
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
    # Step 3
    folder = (
        f"pipeline-{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"
    )
    root_dir = resolve(qualify(savepoint_dir))
    final = root_dir.child(folder)
    work = root_dir.child(f".{folder}{IN_PROGRESS}") if final.is_local else final
    work_uri = posixpath.join(qualify(savepoint_dir), work.path.rsplit("/", 1)[-1])
    parts = []
    try:
        for job in jobs:
            point = create_savepoint(
                checkpoint_location=job.checkpoint,
                savepoint_dir=posixpath.join(work_uri, JOBS),
                batch_id=chosen[job.name],
            )
            sink = point.manifest.sink
            parts.append(
                PipelineJob(
                    name=job.name,
                    checkpoint=job.checkpoint,
                    savepoint=f"{JOBS}/{point.manifest.savepoint_id}",
                    batch_id=chosen[job.name],
                    query_id=job.query_id,
                    sink=sink.kind if sink is not None else None,
                    target=sink.target if sink is not None else None,
                    app_id=sink.app_id if sink is not None else None,
                )
            )
        manifest = PipelineManifest(name=name, pipeline_id=folder, jobs=parts, joins=joins)
        work.child(PIPELINE_MANIFEST).write_atomic(manifest.to_json() + "\n")
        if work != final:
            work.fs.move(work.path, final.path)
    except BaseException:
        try:
            work.delete_dir()
        except OSError as cleanup:
            log.warning("could not remove the incomplete pipeline savepoint %s: %s", work, cleanup)
        raise
    log.warning(
        "pipeline savepoint %s: %s",
        final,
        ", ".join(f"{j.name} at {j.batch_id}" for j in parts),
    )
    return Pipeline(location=posixpath.join(qualify(savepoint_dir), folder), manifest=manifest)


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


def load_pipeline(*, location: str) -> Pipeline:
    """The pipeline savepoint at ``location`` (its folder, or its ``pipeline.json``)."""
    uri = qualify(location)
    if uri.endswith("/" + PIPELINE_MANIFEST):
        uri = uri[: -len(PIPELINE_MANIFEST) - 1]
    path = resolve(uri).child(PIPELINE_MANIFEST)
    try:
        manifest = PipelineManifest.from_json(path.read_text())
    except FileNotFoundError as e:
        raise SavepointError(
            f"{location} is not a complete pipeline savepoint: {PIPELINE_MANIFEST} is missing"
        ) from e
    except (ValueError, TypeError, KeyError) as e:
        raise SavepointError(f"{path}: unreadable pipeline manifest ({e})") from e
    return Pipeline(location=uri, manifest=manifest)


def list_pipelines(*, savepoint_dir: str) -> list[Pipeline]:
    """The complete pipeline savepoints under ``savepoint_dir``, oldest first."""
    root = resolve(qualify(savepoint_dir))
    found = []
    for info in root.list():
        if info.type.name != "Directory" or info.base_name.startswith("."):
            continue
        if root.child(info.base_name, PIPELINE_MANIFEST).exists():
            found.append(
                load_pipeline(location=posixpath.join(qualify(savepoint_dir), info.base_name))
            )
    return sorted(found, key=lambda p: (p.manifest.created_ms, p.manifest.pipeline_id))


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
        kafka_rewind = mode == "rewind" and job.sink == "chkpt-kafka"
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
        if fork is not None and job.sink == "chkpt-kafka" and job.app_id == job.query_id:
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
