"""Demo and benchmark data: per-app page-view log events (the seeds' PV example).

Each event is a JSON object of about 200 bytes with a unique, sequential ``event_id``
so a reader can check the output record by record.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

PAGE_VIEW_SCHEMA_DDL = (
    "event_id long, app string, user_id string, page string, referrer string, "
    "duration_ms int, user_agent string, ts timestamp"
)

_APPS = ("app1", "app2", "app3", "app4", "app5")
_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64; rv:131.0) Gecko/20100101",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X)",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537",
)
_PAGES = ("/", "/search", "/cart", "/checkout", "/item/42", "/item/7", "/help", "/account")


@dataclass(frozen=True)
class PageViews:
    """A deterministic stream of page-view events: ``PageViews(seed=1).events(0, 100)``."""

    seed: int = 1
    start_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z

    def event(self, event_id: int) -> dict[str, object]:
        rnd = random.Random(self.seed * 1_000_003 + event_id)
        return {
            "event_id": event_id,
            "app": rnd.choice(_APPS),
            "user_id": f"user-{rnd.randrange(10_000):05d}",
            "page": rnd.choice(_PAGES),
            "referrer": rnd.choice(("https://www.example.com/", "direct", "email", "ads")),
            "duration_ms": rnd.randrange(50, 30_000),
            "user_agent": rnd.choice(_AGENTS),
            "ts": _iso(self.start_ms + event_id * 37),
        }

    def encoded(self, event_id: int) -> tuple[bytes, bytes]:
        """``(key, value)`` for Kafka: the app as key (so an app stays on one partition)."""
        event = self.event(event_id)
        return str(event["app"]).encode(), json.dumps(event, separators=(",", ":")).encode()

    def events(self, first: int, count: int) -> Iterator[tuple[bytes, bytes]]:
        for event_id in range(first, first + count):
            yield self.encoded(event_id)


def _iso(ms: int) -> str:
    import datetime as dt

    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def produce_page_views(
    *,
    bootstrap_servers: str,
    topic: str,
    first: int,
    count: int,
    seed: int = 1,
    spread_over: int | None = None,
    settings: Mapping[str, Any] | None = None,
) -> None:
    """Write ``count`` events starting at ``first`` to ``topic`` and flush. By default the
    app is the key (an app's events stay in one partition, so partitions are uneven);
    ``spread_over=P`` sends event i to partition i % P instead. ``settings``: the
    kafka-python client settings of a secured cluster."""
    from spark_chkpt.kafka.client.factory import kafka_producer

    producer = kafka_producer(
        bootstrap_servers=bootstrap_servers,
        settings=settings,
        linger_ms=20,
        batch_size=256 * 1024,
        acks="all",
    )
    try:
        for i, (key, value) in enumerate(PageViews(seed=seed).events(first, count)):
            partition = (first + i) % spread_over if spread_over else None
            producer.send(topic, key=key, value=value, partition=partition)
        producer.flush()
    finally:
        producer.close()
