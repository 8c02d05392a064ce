"""Benchmark of the chkpt-kafka sink's write path: records/s of one write task's producer.

    python -m bench.producer [--records 300000] [--partitions 4]

On the embedded broker (or ``--bootstrap-servers``), with page-view JSON values of about
200 bytes keyed by app, in Arrow batches of 10,000 rows (Spark's default), each into a
topic of its own:

- ``kafka-python``, ``confluent``: the sink's producer of that ``kafka.client``
  (:func:`~spark_chkpt.kafka.sink.writer.build_producer`): ``send`` of every batch, then
  ``finish`` (flushed, every record acknowledged and counted);
- ``raw confluent``: confluent-kafka's ``Producer`` alone with the same librdkafka
  settings, no headers, no delivery callback: the ceiling on this machine.

No Spark: what is measured is the producer, from Arrow batches to acknowledged records.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 10_000


def _batches(records: int) -> list[pa.RecordBatch]:
    import pyarrow as pa

    from spark_chkpt.testing.generator import PageViews

    events = list(PageViews(seed=1).events(0, records))
    return [
        pa.record_batch(
            {
                "key": pa.array([k for k, _ in events[i : i + BATCH_ROWS]], pa.binary()),
                "value": pa.array([v for _, v in events[i : i + BATCH_ROWS]], pa.binary()),
            }
        )
        for i in range(0, records, BATCH_ROWS)
    ]


def _sink(servers: str, topic: str, client: str, batches: list[pa.RecordBatch]) -> float:
    from spark_chkpt.kafka.sink.options import KafkaSinkConfig
    from spark_chkpt.kafka.sink.writer import build_producer

    with tempfile.TemporaryDirectory() as checkpoint:
        config = KafkaSinkConfig.from_options(
            {
                "kafka.bootstrap.servers": servers,
                "topic": topic,
                "checkpointLocation": checkpoint,
                "kafka.client": client,
            }
        )
    producer = build_producer(config=config, batch_id=0, task=0)
    start = time.perf_counter()
    for batch in batches:
        producer.send(batch)
    output = producer.finish()
    seconds = time.perf_counter() - start
    assert output.rows == sum(b.num_rows for b in batches), output.counts
    return seconds


def _raw_confluent(servers: str, topic: str, batches: list[pa.RecordBatch]) -> float:
    import confluent_kafka

    from spark_chkpt.kafka.client.settings import librdkafka_producer_settings
    from spark_chkpt.kafka.sink.options import KafkaSinkConfig

    with tempfile.TemporaryDirectory() as checkpoint:
        settings = KafkaSinkConfig.from_options(
            {"kafka.bootstrap.servers": servers, "checkpointLocation": checkpoint}
        ).producer_settings
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": servers, **librdkafka_producer_settings(settings)}
    )
    start = time.perf_counter()
    produce = producer.produce
    for batch in batches:
        for key, value in zip(
            batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True
        ):
            while True:
                try:
                    produce(topic, value, key)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    seconds = time.perf_counter() - start
    assert left == 0
    return seconds


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="bench.producer", description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bootstrap-servers", help="default: start the embedded broker")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the fastest counts")
    args = parser.parse_args(argv)

    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.testing.embedded_broker import EmbeddedBroker

    batches = _batches(args.records)
    size = sum(len(v) for b in batches for v in b.column(1).to_pylist()) / args.records
    broker = None if args.bootstrap_servers else EmbeddedBroker().start()
    servers = args.bootstrap_servers or (broker.bootstrap_servers if broker else "")
    best: dict[str, float] = {}
    try:
        for round_ in range(args.repeat):
            for name in ("kafka-python", "confluent", "raw confluent"):
                topic = f"bench-producer-{name.replace(' ', '-')}-{round_}-{time.time_ns()}"
                create_topic(bootstrap_servers=servers, name=topic, partitions=args.partitions)
                if name == "raw confluent":
                    seconds = _raw_confluent(servers, topic, batches)
                else:
                    seconds = _sink(servers, topic, name, batches)
                best[name] = min(best.get(name, seconds), seconds)
    finally:
        if broker is not None:
            broker.stop()
    rates = {name: round(args.records / s) for name, s in best.items()}
    result = {"records": args.records, "value_bytes": round(size), "records_per_s": rates}
    for name, rate in rates.items():
        print(f"{name:>14}: {rate:>9,} records/s ({best[name]:.2f} s)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
