"""A pipeline savepoint's manifest (``pipeline.json``): each job's savepoint and the
joins between them; a pipeline savepoint loaded, and those under a folder listed."""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import asdict, dataclass, field

from spark_chkpt.errors import SavepointError
from spark_chkpt.fs import qualify, resolve

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
