"""Topic administration for tests, demos and the sink: create, grow, describe.

Every function takes the user's kafka-python ``settings`` (the security ones reach the
cluster with them) and builds its clients through :mod:`spark_chkpt.kafka.client.factory`;
a refusal by the broker's ACLs leaves as the error naming the ACL to grant.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import ChkptError, ConfigError
from spark_chkpt.kafka.client.access import access_checked
from spark_chkpt.kafka.client.outage import retry_while_refused

Settings = Mapping[str, Any] | None


def _asking(
    bootstrap_servers: str, settings: Settings, operation: str, resource: str
) -> AbstractContextManager[None]:
    """Kafka client calls whose refusal of ``operation`` on ``resource`` leaves named
    (:func:`~spark_chkpt.kafka.client.access.access_checked`)."""
    return access_checked(
        servers=bootstrap_servers, settings=settings or {}, operation=operation, resource=resource
    )


def _admin(bootstrap_servers: str, settings: Settings = None) -> Any:
    from spark_chkpt.kafka.client.factory import kafka_admin

    return kafka_admin(bootstrap_servers=bootstrap_servers, settings=settings)


def _metadata_consumer(bootstrap_servers: str, settings: Settings) -> Any:
    from spark_chkpt.kafka.client.factory import connection_settings, kafka_consumer

    return kafka_consumer(
        bootstrap_servers=bootstrap_servers,
        settings=connection_settings(settings),
        enable_auto_commit=False,
        group_id=None,
    )


def partition_count(*, bootstrap_servers: str, name: str, settings: Settings = None) -> int:
    """How many partitions topic ``name`` has (0: not listed, or not visible)."""

    def ask() -> int:
        consumer = _metadata_consumer(bootstrap_servers, settings)
        try:
            with _asking(bootstrap_servers, settings, "DESCRIBE", name):
                consumer.topics()
                return len(consumer.partitions_for_topic(name) or ())
        finally:
            consumer.close()

    # A killed node still in the cluster's metadata is refused at once by kafka-python;
    # a sink plans its writer, and asks, every micro-batch.
    return retry_while_refused(ask, settings=settings or {}, doing=f"describing topic {name!r}")


def topic_configs(
    *,
    bootstrap_servers: str,
    names: Sequence[str],
    keys: Sequence[str],
    settings: Settings = None,
) -> dict[str, dict[str, str]] | None:
    """``keys`` of each topic's configuration as the broker applies it (topic settings
    and broker defaults alike); ``None`` from a broker without DescribeConfigs."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import IncompatibleBrokerVersion, UnsupportedVersionError

    admin = _admin(bootstrap_servers, settings)
    try:
        with _asking(bootstrap_servers, settings, "DESCRIBE_CONFIGS", names[0]):
            described = admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name) for name in names],
                config_filter="all",
            )
    except (IncompatibleBrokerVersion, UnsupportedVersionError):
        return None
    finally:
        admin.close()
    topics = described.get("topic", {})
    return {
        name: {k: str(v["value"]) for k, v in topics.get(name, {}).items() if k in keys}
        for name in names
    }


def creates_topics_on_demand(*, bootstrap_servers: str, settings: Settings = None) -> bool | None:
    """Whether the cluster's brokers create a topic a client asks for
    (``auto.create.topics.enable``); ``None`` from a broker without DescribeConfigs."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import IncompatibleBrokerVersion, KafkaError, UnsupportedVersionError

    admin = _admin(bootstrap_servers, settings)
    try:
        nodes = [b["broker_id"] for b in admin.describe_cluster()["brokers"]]
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, str(n)) for n in nodes[:1]],
            config_filter="all",
        )
    except (IncompatibleBrokerVersion, UnsupportedVersionError, KafkaError):
        return None
    finally:
        admin.close()
    for broker in described.get("broker", {}).values():
        entry = broker.get("auto.create.topics.enable")
        if entry is not None:
            return str(entry["value"]).lower() == "true"
    return None


# How long a topic missing from the metadata may take to appear there after its creation
# (the broker answers CreateTopics before every broker's metadata lists it).
_NEW_TOPIC_WAIT_S = 5.0

# Output topics found on their cluster, per process: (bootstrap servers, topic).
_PRESENT: set[tuple[str, str]] = set()


def require_output_topic(
    *, bootstrap_servers: str, name: str, option: str = "topic", settings: Settings = None
) -> None:
    """Refuse to write to ``name`` when it does not exist and the brokers would not create
    it: the producer would otherwise wait ``kafka.max.block.ms`` for its metadata and
    fail as if the broker were down. A broker that creates topics on demand, or that
    does not say (no DescribeConfigs), is left to create it.

    Spark plans a sink's writer once per micro-batch, so a topic found is remembered for
    the process: each question costs a client and a metadata refresh (110 ms, measured).
    A topic deleted under a running query is then met by the write tasks, which fail
    the batch with the same error naming the option
    (:func:`spark_chkpt.kafka.sink.writer.produce_all`).
    """
    key = (bootstrap_servers, name)
    if key in _PRESENT:
        return
    if partition_count(bootstrap_servers=bootstrap_servers, name=name, settings=settings) > 0:
        _PRESENT.add(key)
        return
    if (
        creates_topics_on_demand(bootstrap_servers=bootstrap_servers, settings=settings)
        is not False
    ):
        return
    deadline = Deadline.after(seconds=_NEW_TOPIC_WAIT_S)  # created a moment ago?
    while not deadline.expired():
        time.sleep(0.2)
        if partition_count(bootstrap_servers=bootstrap_servers, name=name, settings=settings) > 0:
            _PRESENT.add(key)
            return
    raise ConfigError(
        option,
        name,
        f"topic {name!r} does not exist on Kafka broker {bootstrap_servers}, and the broker "
        "does not create topics on demand (auto.create.topics.enable=false): create it "
        f"first (kafka-topics.sh --create --topic {name} --partitions N), then start the query",
    )


def topic_names(*, bootstrap_servers: str, settings: Settings = None) -> set[str]:
    """The topics the cluster's metadata lists now (those this principal may see)."""

    def ask() -> set[str]:
        consumer = _metadata_consumer(bootstrap_servers, settings)
        try:
            with access_checked(servers=bootstrap_servers, settings=settings or {}):
                return set(consumer.topics())
        finally:
            consumer.close()

    return retry_while_refused(ask, settings=settings or {}, doing="listing topics")


def _wait_for_partitions(
    bootstrap_servers: str,
    name: str,
    partitions: int,
    settings: Settings = None,
    timeout_s: float = 30.0,
) -> None:
    deadline = Deadline.after(seconds=timeout_s)
    while partition_count(bootstrap_servers=bootstrap_servers, name=name, settings=settings) < (
        partitions
    ):
        if deadline.expired():
            raise ChkptError(
                f"topic {name!r} did not show {partitions} partitions within {timeout_s}s"
            )


# CreateTopics' replication factor that asks for the broker's default.replication.factor
# (KIP-464, Kafka 2.4): a topic the project creates is replicated as the cluster's own.
BROKER_DEFAULT_REPLICATION = -1


def create_topic(
    *,
    bootstrap_servers: str,
    name: str,
    partitions: int = 1,
    replication_factor: int = BROKER_DEFAULT_REPLICATION,
    exist_ok: bool = False,
    config: Mapping[str, str] | None = None,
    settings: Settings = None,
) -> None:
    """Create ``name`` (with topic ``config`` such as ``retention.ms``) and wait until its
    metadata shows every partition.

    ``replication_factor`` -1 (the default) lets the broker apply its
    ``default.replication.factor``, as ``kafka-topics --create`` without
    ``--replication-factor`` does; a broker older than 2.4 is asked for that setting."""
    from kafka.errors import IncompatibleBrokerVersion, TopicAlreadyExistsError

    def spec(factor: int) -> dict[str, Any]:
        return {
            name: {
                "num_partitions": partitions,
                "replication_factor": factor,
                "configs": dict(config or {}),
            }
        }

    admin = _admin(bootstrap_servers, settings)
    try:
        with _asking(bootstrap_servers, settings, "CREATE", name):
            try:
                admin.create_topics(spec(replication_factor))
            except IncompatibleBrokerVersion:
                if replication_factor != BROKER_DEFAULT_REPLICATION:
                    raise
                admin.create_topics(spec(_default_replication(admin)))
    except TopicAlreadyExistsError:
        if not exist_ok:
            raise
    finally:
        admin.close()
    _wait_for_partitions(bootstrap_servers, name, partitions, settings)


def _default_replication(admin: Any) -> int:
    """The cluster's ``default.replication.factor`` as a broker reports it (a broker
    before 2.4 needs an explicit factor); 1 when the broker does not say."""
    from kafka.admin import ConfigResource, ConfigResourceType

    nodes = [b["broker_id"] for b in admin.describe_cluster()["brokers"]]
    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, str(n)) for n in nodes[:1]],
        config_filter="all",
    )
    for broker in described.get("broker", {}).values():
        entry = broker.get("default.replication.factor")
        if entry is not None:
            return int(entry["value"])
    return 1


def replication_factors(
    *, bootstrap_servers: str, names: Sequence[str], settings: Settings = None
) -> dict[str, int]:
    """Each listed topic's replication factor: the fewest replicas of any of its
    partitions (a topic missing from the cluster is left out)."""
    admin = _admin(bootstrap_servers, settings)
    try:
        with _asking(bootstrap_servers, settings, "DESCRIBE", names[0]):
            described = admin.describe_topics(list(names))
    finally:
        admin.close()
    factors: dict[str, int] = {}
    for topic in described:
        partitions = topic.get("partitions") or []
        if topic.get("error_code", 0) == 0 and partitions:
            factors[str(topic["name"])] = min(len(p["replica_nodes"]) for p in partitions)
    return factors


def add_partitions(
    *, bootstrap_servers: str, name: str, total: int, settings: Settings = None
) -> None:
    """Grow ``name`` to ``total`` partitions and wait until metadata shows them."""
    from kafka.admin import NewPartitions

    admin = _admin(bootstrap_servers, settings)
    try:
        with _asking(bootstrap_servers, settings, "ALTER", name):
            admin.create_partitions({name: NewPartitions(total)})
    finally:
        admin.close()
    _wait_for_partitions(bootstrap_servers, name, total, settings)


def delete_topic(
    *, bootstrap_servers: str, name: str, timeout_s: float = 60.0, settings: Settings = None
) -> None:
    """Delete ``name`` and wait until the cluster's metadata no longer lists it (Kafka
    answers the delete first and drops the name from its metadata shortly after)."""
    from kafka.errors import UnknownTopicOrPartitionError

    admin = _admin(bootstrap_servers, settings)
    try:
        admin.delete_topics([name])
    except UnknownTopicOrPartitionError:
        pass
    finally:
        admin.close()
    deadline = Deadline.after(seconds=timeout_s)
    while name in topic_names(bootstrap_servers=bootstrap_servers, settings=settings):
        if deadline.expired():
            raise ChkptError(f"topic {name!r} was still listed {timeout_s}s after its delete")
        time.sleep(0.2)
