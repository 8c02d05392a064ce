"""Reading and writing a control topic of barrier index records (driver side).

One :class:`ControlTopic` follows one control topic for one data topic: each
:meth:`~ControlTopic.refresh` reads what was appended since the last call into the
:class:`~spark_chkpt.alignment.index.BarrierIndex` it is, so a long-running query pays
for new index records only.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from spark_chkpt.alignment.barrier import CONTROL_PREFIX, IndexEntry
from spark_chkpt.alignment.index import BarrierIndex
from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import ChkptError, ConfigError, ControlTopicConfigError
from spark_chkpt.kafka.client.fetcher_hook import drain_before_sleeping
from spark_chkpt.kafka.client.metadata import know_leaders, list_offsets, space_refreshes
from spark_chkpt.kafka.client.outage import delivery_timeout_s, flush_within, retry_while_refused
from spark_chkpt.kafka.client.topics import BROKER_DEFAULT_REPLICATION

log = logging.getLogger(__name__)

_READ_TIMEOUT_S = 30.0

# The index must outlive every reader that may still read the data it describes: a
# reader starting from ``earliest`` needs the entries of the oldest data still in the
# topic. Kafka's default retention (7 days) would expire them first.
CONTROL_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}

# Control topics this process has created or seen, so that write tasks ask the broker once.
_ENSURED: set[tuple[str, str]] = set()


def ensure_control_topic(
    *,
    bootstrap_servers: str,
    name: str,
    settings: Mapping[str, Any] | None = None,
    replication_factor: int = BROKER_DEFAULT_REPLICATION,
    min_insync_replicas: int | None = None,
) -> None:
    """Create control topic ``name`` (one partition, infinite retention) unless it exists,
    and refuse one whose settings would let the broker drop index entries
    (:func:`check_control_topic_config`).

    The sink calls this before any task produces (``streamWriter()``, and a write task for
    each topic named by a ``topic`` column), so a reader never mistakes a topic whose first
    snapshot is still in flight for a plain topic and reads unconfirmed records.

    ``replication_factor``: -1 takes the broker's ``default.replication.factor``, as the
    data topics do; ``min_insync_replicas``: the topic's own, else the broker's. A control
    topic less replicated than its data topic (created before, or by hand) is named in a
    warning: its broker's death would stop the sink while the data stays writable.

    Each admin call is asked again while a broker refuses the connection (one of the
    cluster's brokers died and is still in the metadata), for up to the request timeout:
    the sink's start runs again each micro-batch, and a refusal here failed the query.
    Creating with ``exist_ok`` and describing are safe to repeat."""
    from spark_chkpt.kafka.client.topics import create_topic, replication_factors, topic_configs

    key = (bootstrap_servers, name)
    if key in _ENSURED:
        return
    config = dict(CONTROL_TOPIC_CONFIG)
    if min_insync_replicas is not None:
        config["min.insync.replicas"] = str(min_insync_replicas)
    from kafka.errors import InvalidReplicationFactorError

    client_settings = settings or {}
    try:
        retry_while_refused(
            lambda: create_topic(
                bootstrap_servers=bootstrap_servers,
                name=name,
                partitions=1,
                replication_factor=replication_factor,
                exist_ok=True,
                config=config,
                settings=settings,
            ),
            settings=client_settings,
            doing=f"creating control topic {name}",
        )
    except InvalidReplicationFactorError as e:
        asked = "the broker's default.replication.factor" if replication_factor == -1 else ""
        raise ConfigError(
            "controlTopic.replication.factor",
            str(replication_factor),
            f"the brokers refused to create control topic {name} with {asked or 'this'} "
            f"replication factor ({e}): it can be at most the number of brokers",
        ) from e
    data = name.removeprefix(CONTROL_PREFIX)
    configs = retry_while_refused(
        lambda: topic_configs(
            bootstrap_servers=bootstrap_servers,
            names=[name, data],
            keys=["cleanup.policy", "retention.ms", "retention.bytes"],
            settings=settings,
        ),
        settings=client_settings,
        doing=f"describing the configuration of {name}",
    )
    if configs is not None:  # None: the broker has no DescribeConfigs (Tansu)
        check_control_topic_config(name=name, config=configs[name], data_config=configs[data])
    factors = retry_while_refused(
        lambda: replication_factors(
            bootstrap_servers=bootstrap_servers, names=[name, data], settings=settings
        ),
        settings=client_settings,
        doing=f"describing the replicas of {name}",
    )
    warn_if_less_replicated(name=name, data=data, factors=factors)
    _ENSURED.add(key)


def warn_if_less_replicated(*, name: str, data: str, factors: Mapping[str, int]) -> bool:
    """Log a warning when control topic ``name`` has fewer replicas than its data topic
    ``data`` (``factors``: each topic's replication factor); True if it did."""
    mine, theirs = factors.get(name), factors.get(data)
    if mine is None or theirs is None or mine >= theirs:
        return False
    log.warning(
        "control topic %s has replication factor %d, below its data topic %s's %d: the "
        "death of a broker holding its replicas stops the sink while %s stays writable. "
        "Raise it with kafka-reassign-partitions (a reassignment listing %d replicas for "
        "%s-0), or, while nothing has been written to %s yet, delete it and start the "
        "query again: the sink creates it with the cluster's default.replication.factor "
        "(or the controlTopic.replication.factor option)",
        name,
        mine,
        data,
        theirs,
        data,
        theirs,
        name,
        data,
    )
    return True


def check_control_topic_config(
    *, name: str, config: Mapping[str, str], data_config: Mapping[str, str]
) -> None:
    """Raise unless control topic ``name`` keeps every entry as long as its data topic
    keeps the records they describe: no compaction (entries of one snapshot share no key
    to keep the last of), no ``retention.bytes``, a ``retention.ms`` of -1 or at least
    the data topic's (``data_config``; empty when the data topic does not exist yet)."""
    fix = f"set it back with kafka-configs --alter --entity-type topics --entity-name {name}"
    policy = config.get("cleanup.policy", "delete")
    if "compact" in policy.split(","):
        raise ControlTopicConfigError(
            f"control topic {name!r} has cleanup.policy={policy}: compaction drops index "
            f"entries; it must be 'delete' ({fix} --add-config cleanup.policy=delete)"
        )
    size = int(config.get("retention.bytes", "-1"))
    if size >= 0:
        raise ControlTopicConfigError(
            f"control topic {name!r} has retention.bytes={size}: the broker would drop the "
            f"oldest index entries; it must be -1 ({fix} --add-config retention.bytes=-1)"
        )
    kept = int(config.get("retention.ms", "-1"))
    data_kept = int(data_config.get("retention.ms", "-1"))
    if kept >= 0 and (data_kept < 0 or kept < data_kept):
        raise ControlTopicConfigError(
            f"control topic {name!r} has retention.ms={kept}, shorter than its data topic's "
            f"({data_kept}): entries would expire before the records they describe; it "
            f"must be -1 or at least {data_kept} ({fix} --add-config retention.ms=-1)"
        )


class ControlTopic(BarrierIndex):
    """The index entries of one data topic, read incrementally from its control topic."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        control_topic: str,
        data_topic: str,
        client_settings: Mapping[str, Any] | None = None,
        client_id: str = "spark-chkpt-index",
        topic_id: str | None = None,
        start_at: int = 0,
        start_id: str | None = None,
    ) -> None:
        """``start_at``: the control-topic offset to read from, where a reader restarting
        from its offset log knows that no entry before it is needed
        (:meth:`~spark_chkpt.alignment.index.BarrierIndex.needed_from`); 0 reads all.
        ``start_id``: the control topic's Kafka id when that offset was taken: a topic of
        another id now (deleted and created again) is read from its beginning."""
        super().__init__(data_topic=data_topic, topic_id=topic_id)
        self.bootstrap_servers = bootstrap_servers
        self.control_topic = control_topic
        self._settings = dict(client_settings or {})
        self._client_id = client_id
        self._consumer: Any = None
        self._position = max(0, start_at)
        self._start_id = start_id if start_at > 0 else None
        # A sink coordinator's reader: the batch after whose commit it dropped the
        # entries before that commit's read point (-1: none dropped).
        self.trimmed_after = -1

    def _client(self) -> Any:
        if self._consumer is None:
            from spark_chkpt.kafka.client.factory import kafka_consumer

            settings = {
                **self._settings,
                "bootstrap_servers": self.bootstrap_servers.split(","),
                "client_id": self._client_id,
                "group_id": None,
                "enable_auto_commit": False,
                "auto_offset_reset": "earliest",
                "fetch_max_wait_ms": 50,
            }
            self._consumer = kafka_consumer(
                bootstrap_servers=self.bootstrap_servers, settings=settings
            )
            # Each refresh asks whether the control topic exists (a metadata request):
            # about 100 ms each, per downstream batch, before space_refreshes. And it
            # polls to the end it asked for: no sleep with the answer in hand.
            space_refreshes(self._consumer, retry_backoff_ms=settings.get("retry_backoff_ms"))
            drain_before_sleeping(self._consumer._fetcher)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def current_topic_id(self) -> str | None:
        """The data topic's id in fresh metadata (a producer's cached metadata keeps a
        deleted topic's id until it expires)."""
        consumer = self._client()
        self._topics(consumer)  # a metadata request for every topic, ids included
        return topic_id_of(consumer, self.data_topic)

    def exists(self) -> bool:
        return self.control_topic in self._topics(self._client())

    def _topics(self, consumer: Any) -> set[str]:
        """Every topic, in a metadata request sent now, asked again while refused: a
        killed broker of a cluster stays in the metadata until it is fenced, and
        kafka-python raises its refused connection at once (a running sink's commit
        died of it with two brokers of three serving)."""
        return set(
            retry_while_refused(
                consumer.topics,
                settings=consumer.config,
                doing=f"reading the metadata of {self.control_topic}",
            )
        )

    def refresh(
        self, *, metadata_fresh: bool = False, topics: Collection[str] | None = None
    ) -> list[IndexEntry]:
        """Read entries appended since the last call; returns the new ones.

        ``metadata_fresh``: this reader's metadata was fetched a moment ago
        (:meth:`current_topic_id`), so whether the control topic exists is taken from it
        instead of from one more metadata request. ``topics``: the topics of metadata
        another client fetched a moment ago (the source's offset reader, planning the
        batch): the same, without this reader's request (a metadata answer of every
        topic, parsed per partition: milliseconds per batch with 1,000 partitions)."""
        from kafka import TopicPartition

        consumer = self._client()
        cluster = getattr(consumer, "_cluster", None)
        if topics is None and metadata_fresh and cluster is not None:
            topics = set(cluster.topics())
        elif topics is None:
            topics = self._topics(consumer)  # a metadata request, sent now
        if self.control_topic not in topics:
            return []
        tp = TopicPartition(self.control_topic, 0)
        know_leaders(consumer, [tp])  # no request once this reader knows the leader
        consumer.assign([tp])
        # The position moves only once the entries read are added: a read that fails
        # half way (a broker gone, retried by the planner) is read again from the start.
        position = self._position
        # The end to read to is asked for now (ListOffsets), so every entry the broker
        # acknowledged before this call is read: the high watermark a reused consumer
        # reports is the one of its previous fetch until a new response arrives, and
        # ending on it missed a complete entry written just before ("already committed?").
        ends = list_offsets(consumer, [tp], lambda ms: consumer.end_offsets([tp], timeout_ms=ms))
        end = int(ends[tp])
        if self._start_id is not None:  # the first read after a start_at
            now = topic_id_of(consumer, self.control_topic)
            if now is not None and now != self._start_id:
                position = 0  # the control topic was created again: its offsets start over
        if position > end:  # a start_at past the end: the control topic was created again
            position = 0
        consumer.seek(tp, position)
        read: list[IndexEntry] = []
        deadline = Deadline.after(seconds=_READ_TIMEOUT_S)
        while position < end:
            polled = consumer.poll(timeout_ms=60, max_records=10_000)
            for record in polled.get(tp, []):
                read.append(
                    IndexEntry.parse(
                        record.value, topic=self.control_topic, partition=0, offset=record.offset
                    )
                )
            position = max(position, int(consumer.position(tp)))
            if deadline.expired():
                raise ChkptError(
                    f"reading control topic {self.control_topic} timed out at "
                    f"offset {position} (end offset {end})"
                )
        stale = self.stale
        kept = self.add(read)
        self._position = position
        self._start_id = None
        if self.stale > stale:
            log.warning(
                "control topic %s holds %d entries of an earlier topic named %s (deleted "
                "and created again; its id is now %s): they are ignored",
                self.control_topic,
                self.stale - stale,
                self.data_topic,
                self.topic_id,
            )
        return kept

    def control_topic_id(self) -> str | None:
        """The control topic's Kafka id as this reader's metadata knows it (None: not
        read yet, or a broker without topic ids)."""
        return topic_id_of(self._client(), self.control_topic)

    @property
    def position(self) -> int:
        """The control-topic offset read up to."""
        return self._position


def topic_id_of(client: Any, topic: str) -> str | None:
    """The Kafka topic id of ``topic`` from a kafka-python client's metadata (consumer or
    producer), or None when the broker does not report ids (before Kafka 2.8)."""
    cluster = getattr(getattr(client, "_client", None), "cluster", None)
    if cluster is None:
        cluster = getattr(client, "_metadata", None)
    lookup = getattr(cluster, "topic_id", None)
    value = lookup(topic) if callable(lookup) else None
    return str(value) if value else None


def write_entry(
    producer: Any,
    *,
    control_topic: str,
    entry: IndexEntry,
    settings: Mapping[str, Any] | None = None,
) -> int:
    """Append ``entry`` and wait for the broker's acknowledgement (at most the delivery
    timeout of the producer's ``settings``); returns its offset."""
    future = producer.send(control_topic, key=entry.key(), value=entry.value(), partition=0)
    flush_within(producer, settings=settings or {})
    return int(future.get(timeout=delivery_timeout_s(settings or {})).offset)
