"""Barrier alignment over input channels, in the shape of Flink's checkpoint barrier handlers.

An :class:`Aligner` sits between several input channels (Kafka partitions, say) and one
consumer. The caller feeds it records, checkpoint barriers, cancellation markers and
end-of-channel notices; every call returns the events the caller must act on, in order:

* :class:`Forward` -- emit this record downstream now;
* :class:`SnapshotCompleted` -- every open channel delivered barrier ``snapshot_id``;
* :class:`SnapshotAborted` -- the snapshot will not complete (subsumed, cancelled).

More: docs/concepts/kafka-internals.md (spark_chkpt/alignment/aligner.py).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, get_args

from spark_chkpt.errors import InvalidArgumentError

__all__ = [
    "MODES",
    "Aligner",
    "CollectingBarriers",
    "Event",
    "Forward",
    "Mode",
    "SnapshotAborted",
    "SnapshotCompleted",
    "WaitingForFirstBarrier",
]

R = TypeVar("R")

Mode = Literal["aligned", "unaligned", "at-least-once"]
MODES: tuple[str, ...] = get_args(Mode)


@dataclass(frozen=True)
class Forward(Generic[R]):
    """A record the caller should emit downstream now."""

    channel: Hashable
    record: R


@dataclass(frozen=True)
class SnapshotCompleted(Generic[R]):
    """Every open channel delivered barrier ``snapshot_id``.

    ``mode`` is the mode the snapshot actually completed in: ``"unaligned"`` for an aligned
    snapshot switched by the alignment timeout. ``overtaken`` holds, in arrival order, the
    records forwarded while the snapshot was pending but not aligned (see :class:`Aligner`);
    it is empty for aligned and at-least-once snapshots. ``alignment_ms`` is the time from
    the first barrier to the last, on the aligner's clock.
    """

    snapshot_id: int
    mode: Mode
    overtaken: tuple[Forward[R], ...] = ()
    alignment_ms: float = 0.0


@dataclass(frozen=True)
class SnapshotAborted:
    """The snapshot will not complete; ``reason`` is ``"subsumed by <id>"`` or ``"cancelled"``."""

    snapshot_id: int
    reason: str


Event = Forward[R] | SnapshotCompleted[R] | SnapshotAborted


@dataclass
class _Context(Generic[R]):
    """What the states share: the channels, the settings, the output of the current call."""

    channels: frozenset[Hashable]
    mode: Mode
    alignment_timeout_ms: float | None
    clock: Callable[[], float]
    ended: set[Hashable] = field(default_factory=set)
    events: list[Event[R]] = field(default_factory=list)
    latest: int = -1
    """Highest snapshot id begun or cancelled; barriers up to it are stale."""
    last_completed: int | None = None

    def open_channels(self) -> frozenset[Hashable]:
        return self.channels - self.ended

    def emit(self, event: Event[R]) -> None:
        self.events.append(event)


class _State(ABC, Generic[R]):
    """One state of the handler; each handler appends events and returns the next state."""

    @abstractmethod
    def on_record(self, ctx: _Context[R], channel: Hashable, record: R) -> _State[R]: ...

    @abstractmethod
    def on_barrier(self, ctx: _Context[R], channel: Hashable, snapshot_id: int) -> _State[R]: ...

    @abstractmethod
    def on_cancel(self, ctx: _Context[R], snapshot_id: int) -> _State[R]: ...

    @abstractmethod
    def on_end_of_channel(self, ctx: _Context[R], channel: Hashable) -> _State[R]: ...

    @abstractmethod
    def on_timeout_check(self, ctx: _Context[R]) -> _State[R]: ...


class WaitingForFirstBarrier(_State[R]):
    """No snapshot pending: records pass through, a newer barrier starts collecting."""

    def on_record(self, ctx: _Context[R], channel: Hashable, record: R) -> _State[R]:
        ctx.emit(Forward(channel, record))
        return self

    def on_barrier(self, ctx: _Context[R], channel: Hashable, snapshot_id: int) -> _State[R]:
        if snapshot_id <= ctx.latest:
            return self  # trailing barrier of a completed, aborted or cancelled snapshot
        return CollectingBarriers.begin(ctx, channel=channel, snapshot_id=snapshot_id)

    def on_cancel(self, ctx: _Context[R], snapshot_id: int) -> _State[R]:
        if snapshot_id > ctx.latest:
            # Cancelled before any of its barriers came (Flink): its barriers are now stale.
            ctx.latest = snapshot_id
            ctx.emit(SnapshotAborted(snapshot_id, "cancelled"))
        return self

    def on_end_of_channel(self, ctx: _Context[R], channel: Hashable) -> _State[R]:
        return self

    def on_timeout_check(self, ctx: _Context[R]) -> _State[R]:
        return self


@dataclass
class CollectingBarriers(_State[R]):
    """Snapshot ``snapshot_id`` is pending; ``arrived`` channels have delivered its barrier.

    ``mode`` starts as the aligner's mode and turns from ``"aligned"`` to ``"unaligned"``
    when the alignment times out. ``held`` are the records of blocked channels (aligned);
    ``overtaken`` the records reported with the completion (unaligned).
    """

    snapshot_id: int
    mode: Mode
    started_at: float
    arrived: set[Hashable] = field(default_factory=set)
    held: list[Forward[R]] = field(default_factory=list)
    overtaken: list[Forward[R]] = field(default_factory=list)

    @classmethod
    def begin(cls, ctx: _Context[R], *, channel: Hashable, snapshot_id: int) -> _State[R]:
        ctx.latest = snapshot_id
        state: CollectingBarriers[R] = cls(
            snapshot_id=snapshot_id, mode=ctx.mode, started_at=ctx.clock(), arrived={channel}
        )
        return state._complete_if_aligned(ctx)

    def blocks(self, channel: Hashable) -> bool:
        return self.mode == "aligned" and channel in self.arrived

    def on_record(self, ctx: _Context[R], channel: Hashable, record: R) -> _State[R]:
        forward = Forward(channel, record)
        if self.blocks(channel):
            self.held.append(forward)
            return self
        ctx.emit(forward)
        if self.mode == "unaligned" and channel not in self.arrived:
            self.overtaken.append(forward)
        return self

    def on_barrier(self, ctx: _Context[R], channel: Hashable, snapshot_id: int) -> _State[R]:
        if snapshot_id == self.snapshot_id:
            if channel in self.arrived:
                return self  # duplicate barrier
            self.arrived.add(channel)
            return self._complete_if_aligned(ctx)
        if snapshot_id > self.snapshot_id:
            self._abort(ctx, f"subsumed by {snapshot_id}")
            return CollectingBarriers.begin(ctx, channel=channel, snapshot_id=snapshot_id)
        return self  # trailing barrier of an older snapshot

    def on_cancel(self, ctx: _Context[R], snapshot_id: int) -> _State[R]:
        if snapshot_id == self.snapshot_id:
            self._abort(ctx, "cancelled")
            return WaitingForFirstBarrier()
        if snapshot_id > self.snapshot_id:
            # Cancelling a newer snapshot also gives up this one (Flink).
            self._abort(ctx, f"subsumed by {snapshot_id}")
            ctx.latest = snapshot_id
            ctx.emit(SnapshotAborted(snapshot_id, "cancelled"))
            return WaitingForFirstBarrier()
        return self

    def on_end_of_channel(self, ctx: _Context[R], channel: Hashable) -> _State[R]:
        return self._complete_if_aligned(ctx)

    def on_timeout_check(self, ctx: _Context[R]) -> _State[R]:
        timeout = ctx.alignment_timeout_ms
        if self.mode != "aligned" or timeout is None:
            return self
        if _elapsed_ms(ctx, self.started_at) < timeout:
            return self
        # Switch this snapshot to unaligned: unblock, the held records go out now.
        self.mode = "unaligned"
        for forward in self.held:
            ctx.emit(forward)
            self.overtaken.append(forward)
        self.held = []
        return self

    def _complete_if_aligned(self, ctx: _Context[R]) -> _State[R]:
        # Fewer barriers than open channels cannot cover them (barriers come on open
        # channels only): the set check below is linear in the channels, and a snapshot
        # of n channels asked it n times (the driver's cut of 1,000 partitions: 1e6 steps).
        if len(self.arrived) < len(ctx.channels) - len(ctx.ended):
            return self
        if not ctx.open_channels() <= self.arrived:
            return self
        ctx.emit(
            SnapshotCompleted(
                snapshot_id=self.snapshot_id,
                mode=self.mode,
                overtaken=tuple(self.overtaken),
                alignment_ms=_elapsed_ms(ctx, self.started_at),
            )
        )
        ctx.last_completed = self.snapshot_id
        self._release(ctx)
        return WaitingForFirstBarrier()

    def _abort(self, ctx: _Context[R], reason: str) -> None:
        ctx.emit(SnapshotAborted(self.snapshot_id, reason))
        self._release(ctx)

    def _release(self, ctx: _Context[R]) -> None:
        for forward in self.held:
            ctx.emit(forward)
        self.held = []


def _elapsed_ms(ctx: _Context[R], since: float) -> float:
    return max(0.0, (ctx.clock() - since) * 1000.0)


class Aligner(Generic[R]):
    """Aligns checkpoint barriers over ``channels``; see the module docstring for the modes.

    Every method returns the events caused by the call, in the order the caller must act
    on them. ``clock`` returns seconds (monotonic); ``alignment_timeout_ms`` applies to the
    aligned mode only and is checked on :meth:`poll_timeout`, :meth:`on_record`,
    :meth:`on_barrier` and :meth:`on_end_of_channel`.
    """

    def __init__(
        self,
        *,
        channels: Iterable[Hashable],
        mode: Mode = "aligned",
        alignment_timeout_ms: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        channel_set = frozenset(channels)
        if not channel_set:
            raise InvalidArgumentError("an Aligner needs at least one channel")
        if mode not in MODES:
            raise InvalidArgumentError(f"mode {mode!r}: must be one of {', '.join(MODES)}")
        if alignment_timeout_ms is not None:
            if mode != "aligned":
                raise InvalidArgumentError(
                    f"alignment_timeout_ms={alignment_timeout_ms!r}: only allowed with "
                    f"mode 'aligned', not {mode!r}"
                )
            if alignment_timeout_ms < 0:
                raise InvalidArgumentError(
                    f"alignment_timeout_ms={alignment_timeout_ms!r}: must be >= 0"
                )
        self._ctx: _Context[R] = _Context(
            channels=channel_set,
            mode=mode,
            alignment_timeout_ms=alignment_timeout_ms,
            clock=clock,
        )
        self._state: _State[R] = WaitingForFirstBarrier()

    # -- events -------------------------------------------------------------------------

    def on_record(self, *, channel: Hashable, record: R) -> list[Event[R]]:
        """A record arrived on ``channel``: forwarded now, or held while the channel is blocked."""
        self._check_open(channel, what="record")
        self._state = self._state.on_timeout_check(self._ctx)
        self._state = self._state.on_record(self._ctx, channel, record)
        return self._drain()

    def on_barrier(self, *, channel: Hashable, snapshot_id: int) -> list[Event[R]]:
        """Barrier ``snapshot_id`` arrived on ``channel``; stale and duplicate ones are ignored."""
        self._check_open(channel, what="barrier")
        if snapshot_id < 0:
            raise InvalidArgumentError(f"snapshot_id={snapshot_id!r}: must be >= 0")
        self._state = self._state.on_timeout_check(self._ctx)
        self._state = self._state.on_barrier(self._ctx, channel, snapshot_id)
        return self._drain()

    def on_cancel(self, *, snapshot_id: int) -> list[Event[R]]:
        """Flink's ``CancelCheckpointMarker``: abort ``snapshot_id`` if pending, and make its
        barriers stale if it has not begun. Cancelling an older snapshot is ignored."""
        self._state = self._state.on_cancel(self._ctx, snapshot_id)
        return self._drain()

    def on_end_of_channel(self, *, channel: Hashable) -> list[Event[R]]:
        """``channel`` is finished: it counts as aligned for every later barrier. Repeated
        calls are ignored; a record or barrier on an ended channel raises ``ValueError``."""
        self._check_known(channel)
        if channel in self._ctx.ended:
            return []
        self._ctx.ended.add(channel)
        self._state = self._state.on_timeout_check(self._ctx)
        self._state = self._state.on_end_of_channel(self._ctx, channel)
        return self._drain()

    def poll_timeout(self) -> list[Event[R]]:
        """Apply the alignment timeout; call it periodically while records are scarce."""
        self._state = self._state.on_timeout_check(self._ctx)
        return self._drain()

    # -- queries ------------------------------------------------------------------------

    def is_blocked(self, channel: Hashable) -> bool:
        """Whether records of ``channel`` are being held back by an alignment."""
        self._check_known(channel)
        state = self._state
        return isinstance(state, CollectingBarriers) and state.blocks(channel)

    @property
    def mode(self) -> Mode:
        return self._ctx.mode

    @property
    def state(self) -> _State[R]:
        """The current state object (for inspection)."""
        return self._state

    @property
    def current_snapshot(self) -> int | None:
        """The snapshot being aligned, if any."""
        state = self._state
        return state.snapshot_id if isinstance(state, CollectingBarriers) else None

    @property
    def last_completed(self) -> int | None:
        return self._ctx.last_completed

    @property
    def buffered(self) -> int:
        """How many records are held back."""
        state = self._state
        return len(state.held) if isinstance(state, CollectingBarriers) else 0

    @property
    def open_channels(self) -> frozenset[Hashable]:
        """The channels that have not ended."""
        return self._ctx.open_channels()

    # -- helpers ------------------------------------------------------------------------

    def _check_known(self, channel: Hashable) -> None:
        if channel not in self._ctx.channels:
            raise InvalidArgumentError(f"unknown channel {channel!r}")

    def _check_open(self, channel: Hashable, *, what: str) -> None:
        self._check_known(channel)
        if channel in self._ctx.ended:
            raise InvalidArgumentError(f"{what} on channel {channel!r} after its end-of-channel")

    def _drain(self) -> list[Event[R]]:
        events, self._ctx.events = self._ctx.events, []
        return events
