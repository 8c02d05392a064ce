"""Options of the ``chkpt-kafka`` sink (Spark's Kafka sink names), parsed on the driver."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_chkpt.errors import ConfigError
from spark_chkpt.fs import qualify
from spark_chkpt.kafka.client_settings import kafka_client_settings
from spark_chkpt.options import lowercase, parse_positive_int, warn_unknown

_KNOWN_KAFKA_SINK_OPTIONS = {
    k.lower()
    for k in (
        "topic",
        "controlTopic",
        "checkpointLocation",
        "queryName",
        "txnAppId",
        "retainedSnapshots",
        "path",
    )
}


@dataclass(frozen=True)
class KafkaSinkConfig:
    """Validated options of the ``chkpt-kafka`` sink (Spark's Kafka sink names)."""

    bootstrap_servers: str
    topic: str | None
    control_topic: str | None
    checkpoint_location: str
    query_name: str | None
    txn_app_id: str | None
    retained_snapshots: int
    producer_settings: Mapping[str, Any]

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSinkConfig:
        opts = lowercase(options)
        servers = opts.get("kafka.bootstrap.servers", "").strip()
        if not servers:
            raise ConfigError(
                "kafka.bootstrap.servers", None, "required: a comma-separated list of host:port"
            )
        checkpoint = opts.get("checkpointlocation", "").strip()
        if not checkpoint:
            raise ConfigError(
                "checkpointLocation", None, "required: barriers are numbered by Spark's batch ids"
            )
        warn_unknown(
            opts,
            known=_KNOWN_KAFKA_SINK_OPTIONS,
            connector="chkpt-kafka sink",
            prefixes=("kafka.",),
        )
        settings: dict[str, Any] = {
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 10,
            "batch_size": 512 * 1024,
        }
        settings.update(kafka_client_settings(opts, role="producer"))
        return cls(
            bootstrap_servers=servers,
            topic=opts.get("topic") or None,
            control_topic=opts.get("controltopic") or None,
            checkpoint_location=qualify(checkpoint),
            query_name=opts.get("queryname"),
            txn_app_id=opts.get("txnappid") or None,
            retained_snapshots=parse_positive_int(
                "retainedSnapshots", opts.get("retainedsnapshots"), default=10, allow_zero=True
            )
            or 0,
            producer_settings=settings,
        )

    def producer_kwargs(self, *, client_id: str) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "client_id": client_id,
            **self.producer_settings,
        }
