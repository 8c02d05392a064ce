"""The sink registry (spark_chkpt.sinks): no module outside a sink's own package compares
a sink kind's name, and a third sink needs nothing but its object and the registry. Real
delta-rs tables and checkpoint folders for the savepoint, no Spark."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.cli import main
from spark_chkpt.delta.sink.committer import DeltaCoordinator
from spark_chkpt.delta.upsert.committer import UpsertCommitter
from spark_chkpt.kafka.sink.committer import KafkaCoordinator
from spark_chkpt.savepoint.manifest import MANIFEST, load_savepoint
from spark_chkpt.savepoint.pipeline.fork import _writes
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.sinks import register_sink_kind, registry, sink_kind, sink_kinds
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest
from tests.delta.sink.test_coordinator import SCHEMA
from tests.project.test_architecture import modules, under
from tests.savepoint.test_fencing import Run, ids_of

# A sink's own packages: the one place that may name its kind.
SINK_PACKAGES = ("spark_chkpt.delta.sink", "spark_chkpt.delta.upsert", "spark_chkpt.kafka.sink")
KINDS = set(sink_kinds())  # the names records carry ("DeltaUpsert" is a class name)


def _names_a_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in KINDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_kind(e) for e in node.elts)
    return False


def kind_comparisons(source: str) -> list[int]:
    """The lines of ``source`` that compare something with a sink kind's name."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Compare)
        and any(_names_a_kind(side) for side in (node.left, *node.comparators))
    ]


def test_the_scan_sees_a_comparison() -> None:
    assert kind_comparisons('if sink.kind == "chkpt-kafka":\n    pass\n') == [1]
    assert kind_comparisons('ok = record.sink in ("x", "chkpt-delta")\n') == [1]
    assert kind_comparisons('sink = "chkpt-kafka"\n') == []


def test_no_sink_kind_name_is_compared_outside_the_sinks_packages() -> None:
    found = {
        name: lines
        for name, path in modules().items()
        if not any(under(name, p) for p in SINK_PACKAGES)
        for lines in [kind_comparisons(path.read_text())]
        if lines
    }
    assert not found, f"sink kinds compared by name (ask spark_chkpt.sinks instead): {found}"


def test_each_built_in_kind_is_the_name_its_coordinator_records() -> None:
    assert set(sink_kinds()) == {
        DeltaCoordinator.sink,
        UpsertCommitter.sink,
        KafkaCoordinator.sink,
    }
    assert sink_kind(None) is sink_kind("chkpt-delta")  # a manifest naming no sink
    with pytest.raises(Exception, match="sink kind 'jdbc' is not one this release knows"):
        sink_kind("jdbc")


@dataclass(frozen=True)
class ToyRewound:
    table: str
    restore_version: int

    def lines(self, *, generation: int, resumes_at: int) -> list[str]:
        return [f"{self.table} at mark {self.restore_version}"]


class ToyRewind:
    def __init__(self, point: RewindPoint, request: RewindRequest) -> None:
        self.point, self.request = point, request
        self.applied: list[int] = []

    def plan(self) -> int:
        return 7

    def apply(self, *, generation: int, checkpoint_location: str) -> ToyRewound:
        self.applied.append(generation)
        return ToyRewound(table=f"toy://{self.point.target}", restore_version=self.point.batch_id)


class ToySink:
    """A third sink: writes topics with barriers of its own, rewound by ToyRewind."""

    name = "toy-sink"
    has_barriers = True
    target_option = "toyTopic"
    progress_hint = "(ask the toy)"

    def __init__(self) -> None:
        self.rewinds: list[ToyRewind] = []

    def rewind(self, *, point: RewindPoint, request: RewindRequest) -> ToyRewind:
        self.rewinds.append(ToyRewind(point, request))
        return self.rewinds[-1]

    tools: frozenset[str] = frozenset()

    def check_fork(self, *, point: RewindPoint, request: RewindRequest) -> None:
        pass

    def data_source(self) -> None:
        return None

    def describe(
        self, *, target: str | None, app_id: str, batch_id: int, version: int | None
    ) -> str:
        return f"toy mark {batch_id} of {app_id} in {target}"

    def holds(self, *, target: str) -> bool:
        return target.startswith("toy://")

    def barrier_topics(self, target: str | None) -> tuple[str, ...]:
        return tuple((target or "").split("+"))

    def progress(
        self, *, record: SnapshotRecord, bootstrap_servers: str | None
    ) -> dict[str, dict[str, int]] | None:
        return {"toy": {"0": record.batch_id}}


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ToySink:
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    sink = ToySink()
    register_sink_kind(sink)
    return sink


def test_a_third_sink_is_its_object_and_one_registration(
    toy: ToySink, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run(tmp_path)
    for b in range(2):
        run.plan(b, {"events": {"0": 10 * (b + 1)}})
        run.coordinator().commit(messages=[run.stage(b, ids_of(b))], batch_id=b, schema=SCHEMA)
        (run.checkpoint / "commits").mkdir(exist_ok=True)
        (run.checkpoint / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    folder = Path(run.savepoint(1))
    doc = json.loads((folder / MANIFEST).read_text())
    doc["sink"].update(kind="toy-sink", target="a+b")
    (folder / MANIFEST).write_text(json.dumps(doc))

    result = restore_savepoint(
        savepoint=str(folder),
        checkpoint_location=str(tmp_path / "rewound"),
        mode="rewind",
        kafka_bootstrap_servers="broker:9092",
    )
    [rewind] = toy.rewinds
    assert rewind.applied == [7] and result.generation == 7
    assert rewind.request.sink_options["bootstrap-servers"] == "broker:9092"
    assert isinstance(result.rewound, ToyRewound)  # the sink's own result
    assert (result.rewound.table, result.rewound.restore_version) == ("toy://a+b", 1)
    assert _writes(load_savepoint(location=str(folder)).manifest) == ["a", "b"]

    assert main(["savepoint", "show", str(folder)]) == 0
    assert "toy mark 1 of " in capsys.readouterr().out
    from spark_chkpt.cli.status import _barriers

    record: Any = load_savepoint(location=str(folder)).manifest.snapshot_record()
    assert _barriers(record, None) is None  # the record still names the Delta sink
    assert _barriers(json_record(record, sink="toy-sink"), None) == {"toy": {"0": 1}}


def json_record(record: SnapshotRecord, **changes: Any) -> SnapshotRecord:
    return SnapshotRecord.from_json(json.dumps({**json.loads(record.to_json()), **changes}))
