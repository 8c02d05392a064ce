"""Helpers the tests share (not fixtures)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def produce(
    producer: object,
    topic: str,
    values: Sequence[bytes],
    *,
    partitions: int = 1,
    key: Callable[[int], bytes | None] = lambda i: None,
    headers: Callable[[int], list[tuple[str, bytes]] | None] = lambda i: None,
    partition_of: Callable[[int], int] | None = None,
) -> None:
    """Send ``values`` round-robin over ``partitions`` and flush."""
    for i, value in enumerate(values):
        part = partition_of(i) if partition_of else i % partitions
        producer.send(
            topic,
            value=value,
            key=key(i),
            partition=part,  # type: ignore[attr-defined]
            headers=headers(i) or [],
        )
    producer.flush()  # type: ignore[attr-defined]
