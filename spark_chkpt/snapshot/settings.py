"""The snapshot protocol's settings every sink shares, parsed and held in one place.

Every sink (``chkpt-delta``, ``chkpt-kafka``, ``DeltaUpsert``) names the same settings of
the protocol: Spark's ``checkpointLocation`` (batch N is snapshot N of its offset log),
``queryName``, ``txnAppId`` (the app id of ``txn(appId, N)``, the checkpoint's query id
by default), ``retainedSnapshots`` and the timing (``snapshotTimeout``,
``minPauseBetweenSnapshots``). A sink's config parses them with
:func:`snapshot_options` and produces a :class:`SnapshotSettings` (its
``snapshot_settings()``, from :class:`SnapshotConfig`), which is what
:class:`~spark_chkpt.snapshot.coordinator.SnapshotCoordinator` takes; each sink's
coordinator reads its own options from its own config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from spark_chkpt.errors import ConfigError
from spark_chkpt.fs import qualify
from spark_chkpt.options import SNAPSHOT_TIMING_OPTIONS, SnapshotTiming, parse_positive_int
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint

# The options of the protocol every sink takes (check_option_names knows them).
SNAPSHOT_OPTIONS = (
    "checkpointLocation",
    "queryName",
    "txnAppId",
    "retainedSnapshots",
    *SNAPSHOT_TIMING_OPTIONS,
)


@dataclass(frozen=True)
class SnapshotSettings:
    """What the snapshot protocol needs of a sink: the checkpoint whose offset log plans
    the snapshots, the app id of ``txn(appId, N)`` and of the fence's generation, the
    query's name (in each record), how many records the store keeps, the timing."""

    checkpoint_location: str
    app_id: str
    query_name: str | None = None
    retained_snapshots: int = 10
    timing: SnapshotTiming = field(default_factory=SnapshotTiming)


class SnapshotOptions(TypedDict):
    """The protocol's options as a sink's config holds them (its fields of these names)."""

    checkpoint_location: str
    query_name: str | None
    txn_app_id: str | None
    retained_snapshots: int
    timing: SnapshotTiming


class SnapshotConfig:
    """The part of a sink's config the snapshot protocol reads (a base of the config's
    dataclass: its fields of these names, filled by :func:`snapshot_options`)."""

    checkpoint_location: str
    query_name: str | None
    txn_app_id: str | None
    retained_snapshots: int
    timing: SnapshotTiming

    def snapshot_settings(self) -> SnapshotSettings:
        """The protocol's settings, on the driver: the app id is ``txnAppId``, else the
        query id in the checkpoint's ``metadata`` (Spark wrote it before the sink was
        asked for its writer)."""
        return SnapshotSettings(
            checkpoint_location=self.checkpoint_location,
            app_id=self.txn_app_id or SparkCheckpoint(location=self.checkpoint_location).query_id(),
            query_name=self.query_name,
            retained_snapshots=self.retained_snapshots,
            timing=self.timing,
        )


def snapshot_options(opts: Mapping[str, str], *, checkpoint_needed: str) -> SnapshotOptions:
    """The protocol's options of Spark's lower-cased ``opts``, one way for every sink
    (``checkpoint_needed``: why this sink cannot do without ``checkpointLocation``, for
    the error)."""
    checkpoint = opts.get("checkpointlocation", "").strip()
    if not checkpoint:
        raise ConfigError("checkpointLocation", None, f"required: {checkpoint_needed}")
    return SnapshotOptions(
        # qualified on the driver: executors have another working folder
        checkpoint_location=qualify(checkpoint),
        query_name=opts.get("queryname"),
        txn_app_id=opts.get("txnappid") or None,
        retained_snapshots=parse_positive_int(
            "retainedSnapshots", opts.get("retainedsnapshots"), default=10, allow_zero=True
        )
        or 0,
        timing=SnapshotTiming.from_options(opts),
    )
