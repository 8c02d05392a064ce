"""A pipeline file: the jobs of a pipeline and the topics they read and write, kept beside
the jobs so a pipeline savepoint is one command (``savepoint create --pipeline-file F``).

TOML (or JSON, by the ``.json`` ending)::

    name = "page-views"                      # the pipeline's name in its savepoints
    bootstrap_servers = "broker:9092"        # the brokers of the topics joining the jobs
    savepoint_dir = "s3://bucket/savepoints"  # optional: --dir on the command line wins
    timeout = 120                            # optional: seconds to wait for a cut (0)

More: docs/concepts/savepoints.md (spark_chkpt/savepoint/pipeline/file.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_chkpt.errors import SavepointError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_TOP_KEYS = {"name", "bootstrap_servers", "savepoint_dir", "timeout", "jobs"}
_JOB_KEYS = {"checkpoint", "reads", "writes"}


@dataclass(frozen=True)
class DeclaredJob:
    """One ``[[jobs]]`` entry: ``reads`` / ``writes`` are ``None`` when not declared."""

    checkpoint: str
    reads: frozenset[str] | None = None
    writes: frozenset[str] | None = None


@dataclass(frozen=True)
class PipelineFile:
    """A parsed pipeline file; ``path`` is where it was read from, for messages."""

    path: str
    name: str
    bootstrap_servers: str
    jobs: tuple[DeclaredJob, ...]
    savepoint_dir: str | None = None
    timeout_s: float | None = None

    @property
    def checkpoints(self) -> list[str]:
        return [j.checkpoint for j in self.jobs]


def load_pipeline_file(*, path: str) -> PipelineFile:
    """Read and check the pipeline file at ``path`` (a local file)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SavepointError(f"pipeline file {path}: cannot be read ({e.strerror})") from e
    try:
        doc = json.loads(raw) if path.endswith(".json") else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as e:  # TOMLDecodeError and JSONDecodeError
        kind = "JSON" if path.endswith(".json") else "TOML"
        raise SavepointError(f"pipeline file {path}: not valid {kind}: {e}") from e
    return parse_pipeline(doc, path=path)


def parse_pipeline(doc: Any, *, path: str) -> PipelineFile:
    """The pipeline in ``doc`` (the file's parsed content); ``path`` names it in errors."""
    if not isinstance(doc, Mapping):
        raise SavepointError(f"pipeline file {path}: expected a table of keys at the top")
    _no_unknown(doc, _TOP_KEYS, where=f"pipeline file {path}")
    name = _text(doc, "name", path=path, where="name")
    servers = _text(doc, "bootstrap_servers", path=path, where="bootstrap_servers")
    savepoint_dir = _text(doc, "savepoint_dir", path=path, where="savepoint_dir", required=False)
    timeout = doc.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0
    ):
        raise SavepointError(
            f"pipeline file {path}: timeout = {timeout!r}: expected seconds, a number >= 0"
        )
    entries = doc.get("jobs")
    if not isinstance(entries, list) or len(entries) < 2:
        raise SavepointError(
            f"pipeline file {path}: jobs: expected two or more [[jobs]] entries, each with "
            "its checkpoint"
        )
    jobs = tuple(_job(entry, index=i, path=path) for i, entry in enumerate(entries))
    seen: dict[str, int] = {}
    for i, job in enumerate(jobs):
        if job.checkpoint in seen:
            raise SavepointError(
                f"pipeline file {path}: jobs[{seen[job.checkpoint]}] and jobs[{i}] name one "
                f"checkpoint {job.checkpoint}: give each job once"
            )
        seen[job.checkpoint] = i
    return PipelineFile(
        path=path,
        name=name or "",
        bootstrap_servers=servers or "",
        jobs=jobs,
        savepoint_dir=savepoint_dir,
        timeout_s=float(timeout) if timeout is not None else None,
    )


def check_declared(
    declared: Sequence[DeclaredJob],
    found: Sequence[tuple[str, set[str], set[str]]],
    *,
    path: str,
) -> None:
    """Refuse a job whose checkpoint disagrees with the file: ``found`` holds, in the
    file's order, each job's name, the topics its checkpoint reads and the topics its
    ``chkpt-kafka`` sink writes."""
    problems = []
    for job, (name, reads, writes) in zip(declared, found, strict=True):
        for kind, said, seen in (("reads", job.reads, reads), ("writes", job.writes, writes)):
            if said is not None and set(said) != set(seen):
                problems.append(
                    f"job {name} ({job.checkpoint}) {kind} {_topics(seen)} by its checkpoint, "
                    f"the file says {_topics(said)}"
                )
    if problems:
        raise SavepointError(
            f"pipeline file {path} does not match the jobs' checkpoints: "
            + "; ".join(problems)
            + ". Nothing was written: fix the file, or the checkpoint it names."
        )


def _job(entry: Any, *, index: int, path: str) -> DeclaredJob:
    where = f"jobs[{index}]"
    if not isinstance(entry, Mapping):
        raise SavepointError(f"pipeline file {path}: {where}: expected a table with a checkpoint")
    _no_unknown(entry, _JOB_KEYS, where=f"pipeline file {path}: {where}")
    checkpoint = _text(entry, "checkpoint", path=path, where=f"{where}.checkpoint")
    return DeclaredJob(
        checkpoint=checkpoint or "",
        reads=_topic_set(entry, "reads", path=path, where=f"{where}.reads"),
        writes=_topic_set(entry, "writes", path=path, where=f"{where}.writes"),
    )


def _no_unknown(doc: Mapping[str, Any], allowed: set[str], *, where: str) -> None:
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise SavepointError(
            f"{where}: unknown key {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )


def _text(
    doc: Mapping[str, Any], key: str, *, path: str, where: str, required: bool = True
) -> str | None:
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        shown = "missing" if value is None else f"= {value!r}"
        raise SavepointError(f"pipeline file {path}: {where} {shown}: expected a non-empty string")
    return value.strip()


def _topic_set(doc: Mapping[str, Any], key: str, *, path: str, where: str) -> frozenset[str] | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(t, str) and t.strip() for t in value):
        raise SavepointError(
            f"pipeline file {path}: {where} = {value!r}: expected a list of topic names"
        )
    return frozenset(t.strip() for t in value)


def _topics(topics: set[str] | frozenset[str]) -> str:
    return "[" + ", ".join(sorted(topics)) + "]" if topics else "no topic"
