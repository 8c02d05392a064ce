"""A pipeline savepoint restored as a fork: every job a new query beside the original
pipeline, into new topics and new tables, the original left untouched.

:func:`plan_fork` checks everything before anything is written; :func:`prepare_topics`
creates the topics and the fork's marker. The protocol: docs/concepts/savepoints.md.
"""

from __future__ import annotations

import json
import logging
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from spark_chkpt.alignment.barrier import control_topic_for
from spark_chkpt.errors import SavepointError
from spark_chkpt.fs import qualify, resolve
from spark_chkpt.kafka.client.factory import kafka_consumer
from spark_chkpt.kafka.client.topics import create_topic, partition_count, topic_names
from spark_chkpt.offsets import META_KEY
from spark_chkpt.savepoint.manifest import SavepointManifest, load_savepoint
from spark_chkpt.sinks import sink_kind

log = logging.getLogger(__name__)

MARKER = "_pipeline_fork.json"
CONTROL_PREFIX = control_topic_for("")


@dataclass(frozen=True)
class ForkPlan:
    """The names of a pipeline fork and, once :func:`prepare_topics` ran, where each new
    topic starts (topic -> partition -> offset)."""

    pipeline_id: str
    topics: dict[str, str]  # old topic -> new topic
    partitions: dict[str, int]  # new topic -> partitions
    tables: dict[str, str]  # job -> its new table
    starts: dict[str, dict[str, int]]

    def rewrite_for(
        self, reads: Sequence[str], *, apps: Mapping[str, str] | None = None
    ) -> Callable[[Any], Any] | None:
        """The rewrite of one job's source offsets: each renamed topic it reads becomes
        the new topic at its start offsets, its report too (None: it reads no renamed
        topic). ``apps``: old app id -> its forked writer's, where they differ."""
        renamed = {old: new for old, new in self.topics.items() if old in reads}
        if not renamed:
            return None
        starts, app_ids = self.starts, dict(apps or {})

        def rewrite(offsets: Any) -> Any:
            if not isinstance(offsets, dict):
                return offsets
            out: dict[str, Any] = {}
            for topic, value in offsets.items():
                if topic == META_KEY and isinstance(value, dict):
                    out[topic] = _moved(value, renamed, starts, app_ids)
                elif topic in renamed:
                    out[renamed[topic]] = dict(starts[renamed[topic]])
                else:
                    out[topic] = value
            return out

        return rewrite


def _moved(
    meta: dict[str, Any],
    renamed: Mapping[str, str],
    starts: Mapping[str, Mapping[str, int]],
    apps: Mapping[str, str],
) -> dict[str, Any]:
    """A source's alignment reports on the renamed topics: a fan-in report's apps at the
    new topic's first offsets (see the module docstring), under their forked app ids, and
    no ``index_from`` (the new topic's control topic is read from its beginning)."""
    reports = meta.get("topics")
    if not isinstance(reports, dict):
        return meta
    moved: dict[str, Any] = {}
    for topic, report in reports.items():
        new = renamed.get(topic)
        if new is not None and isinstance(report, dict):
            report = dict(report)
            # An offset in the old topic's control topic: the new one's starts empty.
            report.pop("index_from", None)
            if isinstance(report.get("app"), str):
                report["app"] = apps.get(report["app"], report["app"])
            if isinstance(fanned := report.get("apps"), dict):
                at = {"from": dict(starts[new]), "pending": dict(starts[new])}
                report["apps"] = {apps.get(a, a): {**r, **at} for a, r in fanned.items()}
        moved[new or topic] = report
    return {**meta, "topics": moved}


def pairs(items: Sequence[str], *, option: str) -> dict[str, str]:
    """``OLD=NEW`` items of ``option`` as a mapping, one clear error for a bad one."""
    found: dict[str, str] = {}
    for item in items:
        old, sep, new = item.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise SavepointError(f"{option} {item!r}: give OLD=NEW")
        if old.strip() in found:
            raise SavepointError(f"{option}: {old.strip()} is renamed twice")
        found[old.strip()] = new.strip()
    return found


def _reads(manifest: SavepointManifest) -> set[str]:
    return {
        t
        for source in manifest.source_offsets
        if isinstance(source, dict)
        for t in source
        if t != META_KEY
    }


def _writes(manifest: SavepointManifest) -> list[str]:
    sink = manifest.sink
    if sink is None:
        return []
    return list(sink_kind(sink.kind).barrier_topics(sink.target))


def _jobs(names: Sequence[str]) -> str:
    return ("jobs " if len(names) > 1 else "job ") + ", ".join(names)


def _norm(uri: str) -> str:
    return qualify(uri).rstrip("/")


def _tables(
    jobs: Mapping[str, SavepointManifest], items: Sequence[str], pipeline: str
) -> dict[str, str]:
    """``--table-path`` items (``JOB=PATH``, or ``PATH`` when one job writes a table) as
    job -> path, every job that does not write Kafka given one."""
    need = [name for name, m in jobs.items() if not _writes(m)]
    tables: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if sep and name in jobs:
            tables[name] = path
        elif len(need) == 1 and need[0] not in tables:
            tables[need[0]] = item
        else:
            raise SavepointError(
                f"--table-path {item!r}: name the job (JOB=PATH; jobs that write tables: "
                f"{', '.join(need) or 'none'})"
            )
    for name in tables:
        if name not in need:
            raise SavepointError(
                f"--table-path {name}={tables[name]}: job {name} writes Kafka "
                f"({', '.join(_writes(jobs[name]))}): rename its topic with --rename-topic "
                "instead"
            )
    missing = [n for n in need if n not in tables]
    if missing:
        raise SavepointError(
            f"pipeline {pipeline}: a fork writes new tables; give --table-path for job(s) "
            f"{', '.join(missing)} (JOB=PATH)"
        )
    return tables


def _marker(checkpoint_dir: str) -> dict[str, Any] | None:
    return resolve(qualify(checkpoint_dir)).child(MARKER).read_json_object()


def plan_fork(
    *,
    pipeline_id: str,
    pipeline: str,
    savepoints: Mapping[str, str],
    checkpoints: Mapping[str, str],
    checkpoint_dir: str,
    rename_topics: Mapping[str, str],
    table_paths: Sequence[str],
    bootstrap_servers: str | None,
) -> ForkPlan:
    """Every check of a pipeline fork (see the module docstring); writes nothing.
    ``savepoints`` and ``checkpoints``: each job's savepoint and production checkpoint."""
    jobs = {name: load_savepoint(location=sp).manifest for name, sp in savepoints.items()}
    _check_checkpoint_dir(checkpoint_dir, checkpoints)
    _check_renames(jobs, rename_topics, pipeline)
    tables = _tables(jobs, table_paths, pipeline)
    _check_tables(jobs, tables)
    marker = _checked_marker(checkpoint_dir, pipeline_id, rename_topics, tables)
    partitions = _new_topics(
        pipeline, rename_topics, bootstrap_servers, ours=set((marker or {}).get("starts", {}))
    )
    return ForkPlan(
        pipeline_id=pipeline_id,
        topics=dict(rename_topics),
        partitions=partitions,
        tables=tables,
        starts=dict((marker or {}).get("starts", {})),
    )


def _check_checkpoint_dir(checkpoint_dir: str, checkpoints: Mapping[str, str]) -> None:
    """The fork's checkpoints are none of production's, nor inside one."""
    new_dir = _norm(checkpoint_dir)
    for name, chk in checkpoints.items():
        if new_dir == _norm(chk) or new_dir.startswith(_norm(chk) + "/"):
            raise SavepointError(
                f"--checkpoint-dir {checkpoint_dir} is job {name}'s checkpoint ({chk}) or "
                "inside it: a fork gets folders of its own"
            )


def _check_renames(
    jobs: Mapping[str, SavepointManifest], rename_topics: Mapping[str, str], pipeline: str
) -> None:
    """Every topic a job writes is renamed, to a topic of its own (not one of the
    pipeline's, not a control topic), no two to the same."""
    written: dict[str, list[str]] = {}  # topic -> its writers (several: fan-in)
    for name, m in jobs.items():
        for t in _writes(m):
            written.setdefault(t, []).append(name)
    production = set(written) | {t for m in jobs.values() for t in _reads(m)}
    missing = sorted(t for t in written if t not in rename_topics)
    if missing:
        raise SavepointError(
            f"pipeline {pipeline}: a fork writes new topics; rename "
            + ", ".join(f"{t} (written by {_jobs(written[t])})" for t in missing)
            + " with --rename-topic OLD=NEW (the fork would write production's topic and "
            "its control topic, which production's readers read)"
        )
    for old, new in rename_topics.items():
        if old not in written:
            raise SavepointError(
                f"--rename-topic {old}={new}: no job of pipeline {pipeline} writes topic "
                f"{old} with chkpt-kafka (it writes {', '.join(sorted(written)) or 'none'})"
            )
        if new in production or new.startswith(CONTROL_PREFIX):
            raise SavepointError(
                f"--rename-topic {old}={new}: {new} is "
                + ("a topic of the pipeline" if new in production else "a control topic")
                + ": a fork writes a topic of its own"
            )
    if len(set(rename_topics.values())) != len(rename_topics):
        raise SavepointError("--rename-topic: two topics renamed to the same new topic")


def _check_tables(jobs: Mapping[str, SavepointManifest], tables: Mapping[str, str]) -> None:
    """Each new table is none of production's, no Delta table yet, and no two alike."""
    owned = {
        _norm(path): f"job {name}'s {what}"
        for name, m in jobs.items()
        if m.sink is not None
        for what, path in (("table", m.sink.target), ("dead-letter table", m.sink.dead_letters))
        if path and not _writes(m)
    }
    for name, table in tables.items():
        if _norm(table) in owned:
            raise SavepointError(
                f"--table-path {name}={table}: it is {owned[_norm(table)]}: a fork writes a "
                "table of its own"
            )
        if resolve(qualify(table)).child("_delta_log").exists():
            raise SavepointError(
                f"--table-path {name}={table}: a Delta table is there already: a fork "
                "writes a new table"
            )
    if len({_norm(t) for t in tables.values()}) != len(tables):
        raise SavepointError("--table-path: two jobs given the same table")


def _checked_marker(
    checkpoint_dir: str,
    pipeline_id: str,
    rename_topics: Mapping[str, str],
    tables: Mapping[str, str],
) -> dict[str, Any] | None:
    """An earlier run's marker of this same fork in ``checkpoint_dir`` (None: none);
    another fork's is refused."""
    marker = _marker(checkpoint_dir)
    if marker is not None and (
        marker.get("pipeline_id") != pipeline_id
        or marker.get("topics") != dict(rename_topics)
        or marker.get("tables") != tables
    ):
        raise SavepointError(
            f"{checkpoint_dir} holds a fork of pipeline savepoint {marker.get('pipeline_id')} "
            f"(topics {marker.get('topics')}, tables {marker.get('tables')}): run the same "
            "restore again to finish it, or fork into an empty folder"
        )
    return marker


def _new_topics(
    pipeline: str,
    rename_topics: Mapping[str, str],
    bootstrap_servers: str | None,
    *,
    ours: set[str],
) -> dict[str, int]:
    """Each new topic's partition count (its old topic's); a new topic that exists is
    refused unless an earlier run of this fork created it (``ours``), and so is one whose
    control topic exists."""
    partitions: dict[str, int] = {}
    if rename_topics:
        if not bootstrap_servers:
            raise SavepointError(
                f"pipeline {pipeline}: a fork creates topics "
                f"{', '.join(rename_topics.values())}: give the brokers with --bootstrap-servers"
            )
        existing = topic_names(bootstrap_servers=bootstrap_servers)
        for old, new in rename_topics.items():
            count = partition_count(bootstrap_servers=bootstrap_servers, name=old)
            if count == 0:
                raise SavepointError(f"topic {old} does not exist: cannot size its fork {new}")
            partitions[new] = count
            if new in ours:
                if new not in existing:
                    raise SavepointError(
                        f"topic {new}, which an earlier run of this fork created, is gone: "
                        "fork into an empty folder with new topic names"
                    )
                continue
            if new in existing:
                _refuse_used(bootstrap_servers, old=old, new=new, partitions=count)
            if control_topic_for(new) in existing:
                raise SavepointError(
                    f"--rename-topic {old}={new}: control topic {control_topic_for(new)} "
                    "exists already (another query wrote barriers for that name): pick a new name"
                )
    return partitions


def _offsets(bootstrap_servers: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """The topic's first and end offsets per partition (a broker's death waited out)."""
    from spark_chkpt.kafka.client.metadata import list_offsets, partitions_of

    consumer = kafka_consumer(bootstrap_servers=bootstrap_servers, group_id=None)
    try:
        tps = partitions_of(consumer, topic)
        begins = list_offsets(consumer, tps, lambda ms: consumer.beginning_offsets(tps, ms))
        ends = list_offsets(consumer, tps, lambda ms: consumer.end_offsets(tps, ms))
        first = {tp.partition: int(o) for tp, o in begins.items()}
        end = {tp.partition: int(o) for tp, o in ends.items()}
        return first, end
    finally:
        consumer.close()


def _refuse_used(bootstrap_servers: str, *, old: str, new: str, partitions: int) -> None:
    first, end = _offsets(bootstrap_servers, new)
    if len(first) != partitions:
        raise SavepointError(
            f"--rename-topic {old}={new}: {new} exists with {len(first)} partition(s), {old} "
            f"has {partitions}: a fork's topic has the same partitions"
        )
    used = [p for p in sorted(end) if end[p] > first[p]]
    if used:
        p = used[0]
        raise SavepointError(
            f"--rename-topic {old}={new}: {new} exists and holds records (partition {p}: "
            f"offsets {first[p]}..{end[p] - 1}): the forked downstream would read them; a "
            "fork writes a new topic"
        )


def prepare_topics(
    plan: ForkPlan, *, checkpoint_dir: str, bootstrap_servers: str | None
) -> ForkPlan:
    """Create the fork's topics (those not created already), fix where each starts, and
    write the marker; returns the plan with its start offsets."""
    if plan.starts and set(plan.starts) == set(plan.topics.values()):
        return plan  # a run again: the marker holds everything
    starts = dict(plan.starts)
    for new, count in plan.partitions.items():
        if new in starts:
            continue
        assert bootstrap_servers is not None  # plan_fork refused a fork without brokers
        create_topic(bootstrap_servers=bootstrap_servers, name=new, partitions=count, exist_ok=True)
        first, _ = _offsets(bootstrap_servers, new)
        starts[new] = {str(p): o for p, o in sorted(first.items())}
        log.warning("pipeline fork: created topic %s (%d partitions)", new, count)
    plan = ForkPlan(
        pipeline_id=plan.pipeline_id,
        topics=plan.topics,
        partitions=plan.partitions,
        tables=plan.tables,
        starts=starts,
    )
    resolve(qualify(checkpoint_dir)).child(MARKER).write_atomic(
        json.dumps(asdict(plan), indent=2, sort_keys=True) + "\n"
    )
    return plan


def load_fork(*, checkpoint_dir: str) -> ForkPlan | None:
    """The fork a pipeline restore wrote into ``checkpoint_dir``, if any."""
    doc = _marker(checkpoint_dir)
    if doc is None:
        return None
    return ForkPlan(
        pipeline_id=str(doc["pipeline_id"]),
        topics=dict(doc["topics"]),
        partitions={k: int(v) for k, v in doc["partitions"].items()},
        tables=dict(doc["tables"]),
        starts={t: {str(p): int(o) for p, o in s.items()} for t, s in doc["starts"].items()},
    )


def job_checkpoint(checkpoint_dir: str, job: str) -> str:
    return posixpath.join(qualify(checkpoint_dir), job)
