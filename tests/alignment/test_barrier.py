"""Barrier records and barrier index records: encoding, parsing, corrupt-record messages."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from spark_chkpt.alignment.barrier import (
    ATTEMPT_HEADER,
    BARRIER_HEADER,
    CONTROL_PREFIX,
    MARKER_VERSION,
    Barrier,
    CorruptMarkerError,
    IndexEntry,
    attempt_of,
    control_topic_for,
    is_barrier,
    without_project_headers,
)
from spark_chkpt.errors import ChkptError

WHERE = "events-3 offset 17"
INDEX_WHERE = "__chkpt.events-0 offset 42"


def parse_barrier(value: bytes | None) -> Barrier:
    return Barrier.parse(value, topic="events", partition=3, offset=17)


def parse_entry(value: bytes | None) -> IndexEntry:
    return IndexEntry.parse(value, topic="__chkpt.events", partition=0, offset=42)


def barrier_doc(**changes: Any) -> bytes:
    doc: dict[str, Any] = {"v": 1, "app": "q1", "snapshot": 4, "attempts": ["t-4-0", "t-4-1"]}
    doc.update(changes)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


def entry_doc(**changes: Any) -> bytes:
    doc: dict[str, Any] = {
        "v": 1,
        "kind": "complete",
        "app": "q1",
        "snapshot": 4,
        "topic": "events",
        "attempts": ["t-4-0"],
        "positions": {"0": 10, "1": 12},
        "counts": {"0": 9, "1": 11},
        "created_ms": 1_700_000_000_000,
    }
    doc.update(changes)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


# -- Barrier ---------------------------------------------------------------------------------


def test_barrier_value_round_trips() -> None:
    barrier = Barrier(app_id="q1", snapshot_id=7, attempts=("a", "b"))
    doc = json.loads(barrier.value())
    assert doc == {"v": MARKER_VERSION, "app": "q1", "snapshot": 7, "attempts": ["a", "b"]}
    assert parse_barrier(barrier.value()) == barrier


def test_barrier_with_no_attempts_round_trips() -> None:
    barrier = Barrier(app_id="q1", snapshot_id=0, attempts=())
    assert parse_barrier(barrier.value()) == barrier


def test_barrier_headers_mark_the_record() -> None:
    assert Barrier.headers() == [(BARRIER_HEADER, str(MARKER_VERSION).encode())]
    assert is_barrier(Barrier.headers())


def test_is_barrier() -> None:
    assert not is_barrier(None)
    assert not is_barrier([])
    assert not is_barrier([(ATTEMPT_HEADER, b"t-1-0")])
    assert is_barrier([(ATTEMPT_HEADER, b"t-1-0"), (BARRIER_HEADER, b"1")])


def test_attempt_of() -> None:
    assert attempt_of(None) is None
    assert attempt_of([]) is None
    assert attempt_of([(BARRIER_HEADER, b"1")]) is None
    assert attempt_of([("other", b"x"), (ATTEMPT_HEADER, b"t-3-1")]) == "t-3-1"
    assert attempt_of([(ATTEMPT_HEADER, bytearray(b"t-3-2"))]) == "t-3-2"
    # A record forwarded by an older sink: the writer's own tag is the last one.
    assert attempt_of([(ATTEMPT_HEADER, b"upstream"), (ATTEMPT_HEADER, b"mine")]) == "mine"


def test_without_project_headers_keeps_user_headers_in_order() -> None:
    headers = [("a", b"1"), (ATTEMPT_HEADER, b"up"), ("b", b"2"), (BARRIER_HEADER, b"1")]
    assert without_project_headers(headers) == [("a", b"1"), ("b", b"2")]


def test_attempt_of_tolerates_non_ascii() -> None:
    tag = attempt_of([(ATTEMPT_HEADER, b"t-\xff")])
    assert tag is not None and tag.startswith("t-")


def test_corrupt_marker_is_a_chkpt_error() -> None:
    assert issubclass(CorruptMarkerError, ChkptError)


@pytest.mark.parametrize("value", [b"not json", b"{", None, b"", b"\xff\xfe"])
def test_barrier_not_json(value: bytes | None) -> None:
    with pytest.raises(CorruptMarkerError, match=f"corrupt barrier record at {WHERE}: not JSON"):
        parse_barrier(value)


def test_barrier_json_array() -> None:
    with pytest.raises(CorruptMarkerError, match=f"{WHERE}: expected a JSON object, got list"):
        parse_barrier(b"[1, 2]")


@pytest.mark.parametrize("version", [2, 0, "1", None, ...])
def test_barrier_wrong_version(version: object) -> None:
    with pytest.raises(CorruptMarkerError, match=f"barrier record at {WHERE} has format version"):
        parse_barrier(barrier_doc(v=version))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("snapshot", "4"),
        ("snapshot", True),
        ("snapshot", 4.0),
        ("snapshot", ...),
        ("app", 3),
        ("app", ...),
        ("attempts", "t-4-0"),
        ("attempts", {"t": 1}),
        ("attempts", ...),
    ],
)
def test_barrier_invalid_field(name: str, value: object) -> None:
    with pytest.raises(
        CorruptMarkerError, match=f"corrupt barrier record at {WHERE}: field '{name}'"
    ):
        parse_barrier(barrier_doc(**{name: value}))


# -- IndexEntry ------------------------------------------------------------------------------


def test_index_entry_round_trips_with_int_keys() -> None:
    entry = IndexEntry(
        kind="complete",
        app_id="q1",
        snapshot_id=4,
        topic="events",
        attempts=("t-4-0", "t-4-1"),
        positions={1: 12, 0: 10},
        counts={0: 9, 1: 11},
        created_ms=1234,
    )
    doc = json.loads(entry.value())
    assert doc["positions"] == {"0": 10, "1": 12}
    assert doc["counts"] == {"0": 9, "1": 11}
    parsed = parse_entry(entry.value())
    assert parsed == dataclasses.replace(entry, offset=42)
    assert all(isinstance(p, int) for p in parsed.positions)
    assert all(isinstance(p, int) for p in parsed.counts)
    assert entry.key() == b"q1"


def test_intent_entry_round_trips() -> None:
    entry = IndexEntry(
        kind="intent", app_id="q1", snapshot_id=5, topic="events", attempts=("x",), created_ms=9
    )
    assert parse_entry(entry.value()) == dataclasses.replace(entry, offset=42)


def test_index_entry_optional_fields_default() -> None:
    parsed = parse_entry(entry_doc(counts=..., created_ms=...))
    assert parsed.counts == {}
    assert parsed.created_ms == 0


@pytest.mark.parametrize("value", [b"nope", None, b"\xff"])
def test_index_entry_not_json(value: bytes | None) -> None:
    with pytest.raises(CorruptMarkerError, match=f"corrupt barrier index record at {INDEX_WHERE}"):
        parse_entry(value)


def test_index_entry_json_array() -> None:
    with pytest.raises(
        CorruptMarkerError, match=f"{INDEX_WHERE}: expected a JSON object, got list"
    ):
        parse_entry(b'[{"v": 1}]')


def test_index_entry_wrong_version() -> None:
    with pytest.raises(CorruptMarkerError, match=f"{INDEX_WHERE} has format version 99"):
        parse_entry(entry_doc(v=99))


@pytest.mark.parametrize("kind", ["done", None, 1, ...])
def test_index_entry_unknown_kind(kind: object) -> None:
    with pytest.raises(
        CorruptMarkerError, match=f"corrupt barrier index record at {INDEX_WHERE}: kind"
    ):
        parse_entry(entry_doc(kind=kind))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("snapshot", "4"),
        ("snapshot", False),
        ("snapshot", ...),
        ("app", None),
        ("topic", 5),
        ("attempts", "t-4-0"),
        ("attempts", ...),
        ("positions", [10, 12]),
        ("positions", "0:10"),
        ("positions", ...),
    ],
)
def test_index_entry_invalid_field(name: str, value: object) -> None:
    with pytest.raises(CorruptMarkerError, match=f"corrupt barrier index record at {INDEX_WHERE}"):
        parse_entry(entry_doc(**{name: value}))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("positions", {"x": 1}),
        ("positions", {"0": None}),
        ("positions", {"0": "ten"}),
        ("counts", {"zero": 1}),
        ("counts", {"0": [1]}),
    ],
)
def test_index_entry_invalid_map_entries(name: str, value: object) -> None:
    with pytest.raises(CorruptMarkerError, match=f"corrupt barrier index record at {INDEX_WHERE}"):
        parse_entry(entry_doc(**{name: value}))


@pytest.mark.parametrize("counts", ["9", [9, 11], 3])
def test_index_entry_counts_not_an_object(counts: object) -> None:
    with pytest.raises(CorruptMarkerError, match=f"corrupt barrier index record at {INDEX_WHERE}"):
        parse_entry(entry_doc(counts=counts))


@pytest.mark.parametrize("created_ms", ["yesterday", [1]])
def test_index_entry_invalid_created_ms(created_ms: object) -> None:
    with pytest.raises(CorruptMarkerError, match=f"corrupt barrier index record at {INDEX_WHERE}"):
        parse_entry(entry_doc(created_ms=created_ms))


def test_control_topic_for() -> None:
    assert control_topic_for("events") == "__chkpt.events"
    assert control_topic_for("a.b-c") == CONTROL_PREFIX + "a.b-c"


def test_index_entries_of_an_earlier_topic_id_are_left_out() -> None:
    from spark_chkpt.alignment.index import BarrierIndex

    def entry(snapshot: int, topic_id: str | None) -> IndexEntry:
        return IndexEntry(
            kind="complete",
            app_id="up",
            snapshot_id=snapshot,
            topic="t",
            attempts=("a",),
            positions={0: snapshot},
            topic_id=topic_id,
        )

    parsed = IndexEntry.parse(entry(0, "id-1").value(), topic="c", partition=0, offset=3)
    assert parsed.topic_id == "id-1"
    assert (
        IndexEntry.parse(entry(0, None).value(), topic="c", partition=0, offset=3).topic_id is None
    )
    index = BarrierIndex(data_topic="t", topic_id="id-2")
    kept = index.add([entry(0, "id-1"), entry(1, None), entry(0, "id-2")])
    assert [(e.snapshot_id, e.topic_id) for e in kept] == [(1, None), (0, "id-2")]
    assert index.stale == 1
    assert index.first(app_id="up", snapshot_id=0, kind="complete") == kept[1]
