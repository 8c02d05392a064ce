"""``spark-chkpt diff``: two Delta tables compared at equal source offsets.

The second half of a blue/green deployment of a streaming job: production writes table
A, a shadow fork of a new version (``restore --mode fork --shadow``) writes table B from
a savepoint of production. Comparing the two tables as they are compares different
inputs (each query is at its own offsets). Every ``chkpt-delta`` commit carries its
snapshot record (the source end offsets of the batch it completed), so
:func:`pair_versions` finds the newest pair of versions, one per table, whose records
have equal source offsets (the alignment report aside): the two tables' contents at
those versions come from the same input records. :func:`diff_tables` reads both at
those versions (delta-rs) and sorts the rows, by ``key``, into only in A, only in B and
changed; without a key, whole rows are compared as multisets (only in A / only in B).

Equal offsets happen when both queries planned a batch ending at the same offsets:
after both caught up with quiet topics, or ran with ``Trigger.AvailableNow`` to the same
ends. Until then there is no pair, and :func:`pair_versions` says so.

The rows are compared in memory (``pyarrow`` → Python): meant for result tables such as
aggregates, not for billions of rows.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from spark_chkpt.delta.replay import describe_offsets, positions
from spark_chkpt.delta.table.target import DeltaTarget
from spark_chkpt.errors import ChkptError
from spark_chkpt.fs import qualify
from spark_chkpt.recovery.rebuild import TableSnapshot, snapshot_history


@dataclass(frozen=True)
class VersionPair:
    """A version of each table whose snapshot records have equal source offsets."""

    version_a: int
    version_b: int
    app_a: str
    app_b: str
    batch_a: int
    batch_b: int
    source_offsets: list[Any]


@dataclass(frozen=True)
class ChangedRow:
    key: dict[str, Any]
    a: dict[str, Any]
    b: dict[str, Any]
    columns: list[str]  # the columns whose values differ


@dataclass(frozen=True)
class TableDiff:
    """What ``spark-chkpt diff`` prints."""

    table_a: str
    table_b: str
    pair: VersionPair
    key: list[str]
    only_a: list[dict[str, Any]]
    only_b: list[dict[str, Any]]
    changed: list[ChangedRow]
    same: int
    columns_only_a: list[str] = field(default_factory=list)
    columns_only_b: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.only_a or self.only_b or self.changed)

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["counts"] = {
            "only_a": len(self.only_a),
            "only_b": len(self.only_b),
            "changed": len(self.changed),
            "same": self.same,
        }
        return doc

    def lines(self, *, limit: int | None = None) -> list[str]:
        p = self.pair
        out = [
            f"A  {self.table_a} version {p.version_a} (snapshot {p.batch_a} of {p.app_a})",
            f"B  {self.table_b} version {p.version_b} (snapshot {p.batch_b} of {p.app_b})",
            f"at source offsets {describe_offsets(p.source_offsets)}",
            f"key {', '.join(self.key) if self.key else '(none: whole rows)'}",
        ]
        if self.columns_only_a or self.columns_only_b:
            out.append(
                f"columns only in A: {', '.join(self.columns_only_a) or '-'}; only in B: "
                f"{', '.join(self.columns_only_b) or '-'} (not compared)"
            )
        out.append(
            f"only in A: {len(self.only_a)}, only in B: {len(self.only_b)}, changed: "
            f"{len(self.changed)}, same: {self.same}"
        )
        for sign, rows in (("<", self.only_a), (">", self.only_b)):
            out += [f"{sign} {_row(r)}" for r in rows[:limit]]
            if limit is not None and len(rows) > limit:
                out.append(f"{sign} ... {len(rows) - limit} more")
        for c in self.changed[:limit]:
            diffs = ", ".join(f"{n}: {_value(c.a[n])} → {_value(c.b[n])}" for n in c.columns)
            out.append(f"~ {_row(c.key)}: {diffs}")
        if limit is not None and len(self.changed) > limit:
            out.append(f"~ ... {len(self.changed) - limit} more")
        return out


def pair_versions(
    *, table_a: str, table_b: str, storage_options: Mapping[str, str] | None = None
) -> VersionPair:
    """The newest version of ``table_a`` whose snapshot record's source offsets some
    version of ``table_b`` also has (the newest such version of B); a
    :class:`ChkptError` saying what each table holds if there is none."""
    history_a = snapshot_history(table_uri=table_a, storage_options=storage_options, tool="diff")
    history_b = snapshot_history(table_uri=table_b, storage_options=storage_options, tool="diff")
    for name, history, uri in (("A", history_a, table_a), ("B", history_b, table_b)):
        if not history:
            raise ChkptError(
                f"table {name} ({uri}) has no commit with a snapshot record: it is not "
                "written by chkpt-delta, so its versions cannot be paired by source offsets"
            )
    newest_b: dict[str, TableSnapshot] = {}
    for snap in history_b:  # newest first
        newest_b.setdefault(_offsets_key(snap), snap)
    for snap in history_a:
        match = newest_b.get(_offsets_key(snap))
        if match is not None:
            _require_diff(snap, match)
            return VersionPair(
                version_a=snap.table_version,
                version_b=match.table_version,
                app_a=snap.app_id,
                app_b=match.app_id,
                batch_a=snap.batch_id,
                batch_b=match.batch_id,
                source_offsets=positions(snap.record.source_offsets),
            )
    raise ChkptError(
        f"no version of {table_a} and {table_b} has equal source offsets: A's newest is "
        f"{_where(history_a[0])}, B's newest is {_where(history_b[0])}. The tables pair "
        "once both queries end a batch at the same offsets (both caught up, or both run "
        "with Trigger.AvailableNow to the same end)."
    )


def diff_tables(
    *,
    table_a: str,
    table_b: str,
    key: Sequence[str] = (),
    storage_options: Mapping[str, str] | None = None,
) -> TableDiff:
    """Compare ``table_a`` and ``table_b`` at the versions :func:`pair_versions` finds:
    by ``key`` (columns unique in each table), else whole rows."""
    pair = pair_versions(table_a=table_a, table_b=table_b, storage_options=storage_options)
    target_a = DeltaTarget(uri=table_a, storage_options=storage_options)
    target_b = DeltaTarget(uri=table_b, storage_options=storage_options)
    # DataFusion's reader: column-mapped tables read by their physical columns
    a = target_a.rows(target_a.open_at(pair.version_a))
    b = target_b.rows(target_b.open_at(pair.version_b))
    common = [c for c in a.column_names if c in b.column_names]
    key = list(key)
    for name, table in (("A", a), ("B", b)):
        missing = [k for k in key if k not in table.column_names]
        if missing:
            raise ChkptError(
                f"--key {', '.join(missing)}: not a column of table {name} (its columns: "
                f"{', '.join(table.column_names)})"
            )
    result = _by_key(a, b, key, common) if key else _by_rows(a, b, common)
    only_a, only_b, changed, same = result
    return TableDiff(
        table_a=qualify(table_a),
        table_b=qualify(table_b),
        pair=pair,
        key=key,
        only_a=only_a,
        only_b=only_b,
        changed=changed,
        same=same,
        columns_only_a=[c for c in a.column_names if c not in common],
        columns_only_b=[c for c in b.column_names if c not in common],
    )


Rows = tuple[list[dict[str, Any]], list[dict[str, Any]], list[ChangedRow], int]


def _by_key(a: Any, b: Any, key: list[str], common: list[str]) -> Rows:
    keyed_a = _keyed(a, key, common, "A")
    keyed_b = _keyed(b, key, common, "B")
    values = [c for c in common if c not in key]
    only_a = [row for k, row in keyed_a.items() if k not in keyed_b]
    only_b = [row for k, row in keyed_b.items() if k not in keyed_a]
    changed = []
    same = 0
    for k, row_a in keyed_a.items():
        row_b = keyed_b.get(k)
        if row_b is None:
            continue
        differ = [c for c in values if _hashable(row_a[c]) != _hashable(row_b[c])]
        if differ:
            changed.append(
                ChangedRow(
                    key={c: row_a[c] for c in key},
                    a={c: row_a[c] for c in values},
                    b={c: row_b[c] for c in values},
                    columns=differ,
                )
            )
        else:
            same += 1
    order = _sort_key(key)
    return (
        sorted(only_a, key=order),
        sorted(only_b, key=order),
        sorted(changed, key=lambda c: order(c.key)),
        same,
    )


def _keyed(table: Any, key: list[str], common: list[str], name: str) -> dict[Any, dict[str, Any]]:
    found: dict[Any, dict[str, Any]] = {}
    for row in table.select(common).to_pylist():
        k = tuple(_hashable(row[c]) for c in key)
        if k in found:
            shown = ", ".join(f"{c}={row[c]!r}" for c in key)
            raise ChkptError(
                f"--key {', '.join(key)} is not unique in table {name}: {shown} is in more "
                "than one row (give the columns that identify a row)"
            )
        found[k] = row
    return found


def _by_rows(a: Any, b: Any, common: list[str]) -> Rows:
    rows_a = Counter(_hashable(r) for r in a.select(common).to_pylist())
    rows_b = Counter(_hashable(r) for r in b.select(common).to_pylist())
    only_a = [dict(r) for r, n in (rows_a - rows_b).items() for _ in range(n)]
    only_b = [dict(r) for r, n in (rows_b - rows_a).items() for _ in range(n)]
    same = sum((rows_a & rows_b).values())
    order = _sort_key(common)
    return sorted(only_a, key=order), sorted(only_b, key=order), [], same


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _sort_key(columns: list[str]) -> Any:
    return lambda row: [json.dumps(row.get(c), sort_keys=True, default=str) for c in columns]


def _require_diff(*snaps: TableSnapshot) -> None:
    """Each paired record's sink kind compares its target (the registry says)."""
    from spark_chkpt.sinks import require_tool

    for snap in snaps:
        require_tool(snap.record.sink or None, tool="diff", command="diff")


def _offsets_key(snap: TableSnapshot) -> str:
    return json.dumps(positions(snap.record.source_offsets), sort_keys=True)


def _where(snap: TableSnapshot) -> str:
    return (
        f"version {snap.table_version} (snapshot {snap.batch_id} of {snap.app_id}) at "
        f"{describe_offsets(positions(snap.record.source_offsets))}"
    )


def _row(row: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_value(v)}" for k, v in row.items())


def _value(value: Any) -> str:
    return json.dumps(value, default=str) if not isinstance(value, str) else value
