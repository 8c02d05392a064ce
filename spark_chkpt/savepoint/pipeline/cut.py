"""Where a pipeline savepoint cuts: the jobs as a tree joined by topics, and the newest
upstream snapshot every downstream job has a committed batch ending at (step 2 of
:mod:`spark_chkpt.savepoint.pipeline`), pure: the jobs' checkpoints and the barrier
index are read by :mod:`spark_chkpt.savepoint.pipeline.create`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.errors import SavepointError
from spark_chkpt.savepoint.pipeline.manifest import (
    Join,
)


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
                found = _downstream_batch(edge, index, app, chosen[up.name])
                other = down
            else:
                found = _upstream_snapshot(edge, index, app, chosen[down.name])
                other = up
            if isinstance(found, str):
                return found
            batch, entry, target = found
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


def _downstream_batch(
    edge: Edge, index: Mapping[int, IndexEntry], app: str, snapshot: int
) -> tuple[int, IndexEntry, dict[int, int]] | str:
    """The downstream job's committed batch that ends right after the upstream's
    ``snapshot`` barrier in ``edge``'s topic, with that barrier's entry and the offsets;
    or why there is none."""
    up, down = edge.upstream, edge.downstream
    entry = index.get(snapshot)
    if entry is None:
        return (
            f"snapshot {snapshot} of job {up.name} has no barriers in "
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
    return batches[0], entry, target


def _upstream_snapshot(
    edge: Edge, index: Mapping[int, IndexEntry], app: str, batch: int
) -> tuple[int, IndexEntry, dict[int, int]] | str:
    """The upstream job's committed snapshot whose barrier the downstream's ``batch``
    ends right after in ``edge``'s topic, with its entry and the offsets; or why there
    is none."""
    up, down = edge.upstream, edge.downstream
    target = dict(down.end_of(batch, edge.topic, app) or {})
    hits = [
        e
        for e in index.values()
        if {p: o + 1 for p, o in e.positions.items()} == target and e.snapshot_id in up.batches
    ]
    if not hits:
        return (
            f"batch {batch} of job {down.name} ends in {edge.topic} "
            f"at {json.dumps(target)}, right after no live barrier of a "
            f"committed snapshot of job {up.name} ({up.checkpoint})"
        )
    return hits[0].snapshot_id, hits[0], target
