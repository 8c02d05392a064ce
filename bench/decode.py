"""The read path's decode, per core: records per CPU-second of this process, same topic.

Three readers drain the same topic in this one process, each in turn, twice (the
faster of the two counts), and the figure is records over the process's CPU time
(``time.process_time``: every thread, kafka-python's network included), so a loaded
machine changes it less than a wall-clock rate:

- ``raw``: kafka-python's ``KafkaConsumer.poll`` into ``ConsumerRecord``s, nothing more
  (the raw consumer of ``make bench``'s row (a'));
- ``records``: the source's read task with ``decode=records``: kafka-python's records,
  then Arrow columns (the path before columns);
- ``columns``: the same with ``decode=columns`` (the default): record batches straight
  into Arrow (:mod:`spark_chkpt.kafka.client.columnar`);
- with confluent-kafka installed, ``raw-confluent``: a bare librdkafka ``Consumer``
  (``consume`` in batches of 10,000, nothing more), and ``confluent``: the source's read
  task with ``kafka.client=confluent`` (librdkafka's messages, then Arrow columns).

``make bench`` runs it on the benchmark's topic; standalone (``python -m bench.decode``)
it fills a topic of its own on bench/broker.py's Kafka broker (or ``--bootstrap-servers``).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from collections.abc import Sequence
from typing import Any

from bench.broker import kafka_broker

RUNS = ("raw", "records", "columns")
CONFLUENT_RUNS = ("raw-confluent", "confluent")


def _raw(servers: str, topic: str, ends: dict[Any, int]) -> int:
    """Drain ``ends`` with a bare kafka-python consumer (as make bench's raw row)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=servers, enable_auto_commit=False, group_id=None, max_poll_records=10_000
    )
    remaining = {KafkaTopicPartition(tp.topic, tp.partition): end for tp, end in ends.items()}
    consumer.assign(list(remaining))
    for ktp in remaining:
        consumer.seek(ktp, 0)
    remaining = {ktp: end for ktp, end in remaining.items() if end > 0}
    count = 0
    while remaining:
        for ktp, records in consumer.poll(timeout_ms=1000).items():
            count += len(records)
            if ktp in remaining and consumer.position(ktp) >= remaining[ktp]:
                del remaining[ktp]
    consumer.close()
    return count


def _raw_confluent(servers: str, topic: str, ends: dict[Any, int]) -> int:
    """Drain ``ends`` with a bare librdkafka consumer (assign from offset 0, no group)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "bench-decode-raw",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    remaining = {tp.partition: end for tp, end in ends.items() if end > 0}
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in remaining])
    count = 0
    while remaining:
        for message in consumer.consume(num_messages=10_000, timeout=1.0):
            if message.error() is not None:
                continue
            count += 1
            partition, offset = message.partition(), message.offset()
            if partition in remaining and offset is not None and offset + 1 >= remaining[partition]:
                del remaining[partition]
    consumer.close()
    return count


def _source(servers: str, topic: str, ends: dict[Any, int], decode: str) -> int:
    from spark_chkpt.kafka.client.pool import ConsumerPool
    from spark_chkpt.kafka.source.fetcher import RangeFetcher
    from spark_chkpt.kafka.source.intake import ReadSpec
    from spark_chkpt.kafka.source.options import SourceConfig
    from spark_chkpt.offsets import OffsetRange

    options = {"kafka.bootstrap.servers": servers, "subscribe": topic}
    if decode == "confluent":
        options["kafka.client"] = "confluent"
    else:
        options["decode"] = decode
    config = SourceConfig.from_options(options, streaming=False)
    pool = ConsumerPool()
    rows = 0
    try:
        with RangeFetcher(config=config, client_id="bench-decode", pool=pool) as fetcher:
            specs = [ReadSpec(range=OffsetRange(tp, 0, end)) for tp, end in ends.items()]
            for batch in fetcher.read_group(specs):
                rows += batch.num_rows
    finally:
        pool.close_all()
    return rows


def measure(*, servers: str, topic: str, ends: dict[Any, int], rounds: int = 2) -> dict[str, Any]:
    """Records per CPU-second and per wall-second of each reader (the best of ``rounds``)."""
    records = sum(ends.values())
    best: dict[str, tuple[float, float]] = {}
    runs = RUNS + (CONFLUENT_RUNS if importlib.util.find_spec("confluent_kafka") else ())
    for _ in range(rounds):
        for run in runs:
            wall, cpu = time.perf_counter(), time.process_time()
            if run == "raw":
                got = _raw(servers, topic, ends)
            elif run == "raw-confluent":
                got = _raw_confluent(servers, topic, ends)
            else:
                got = _source(servers, topic, ends, run)
            cpu = time.process_time() - cpu
            wall = time.perf_counter() - wall
            if got != records:
                raise RuntimeError(f"decode bench: {run} read {got} of {records} records")
            if run not in best or cpu < best[run][0]:
                best[run] = (cpu, wall)
    per_core = {run: round(records / cpu) for run, (cpu, _) in best.items()}
    confluent = {}
    if "confluent" in per_core:
        confluent = {
            "columns/confluent": round(per_core["columns"] / per_core["confluent"], 2),
            "confluent/raw-confluent": round(per_core["confluent"] / per_core["raw-confluent"], 2),
        }
    return {
        "records": records,
        "per_cpu_second": per_core,
        **confluent,
        "per_second": {run: round(records / wall) for run, (_, wall) in best.items()},
        "columns/raw": round(per_core["columns"] / per_core["raw"], 2),
        "columns/records": round(per_core["columns"] / per_core["records"], 2),
        "records/raw": round(per_core["records"] / per_core["raw"], 2),
    }


def report_lines(decode: dict[str, Any]) -> list[str]:
    if not decode:
        return []
    rates = decode["per_cpu_second"]
    return [
        f"read path per core ({decode['records']:,} records, records per CPU-second): "
        f"raw kafka-python {rates['raw']:,}, source decode=records {rates['records']:,}, "
        f"decode=columns {rates['columns']:,}; columns/raw = {decode['columns/raw']}, "
        f"columns/records = {decode['columns/records']}",
        *(
            [
                f"  librdkafka: raw {rates['raw-confluent']:,}, source kafka.client=confluent "
                f"{rates['confluent']:,}; columns/confluent = {decode['columns/confluent']}"
            ]
            if "confluent" in rates
            else []
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode", description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bootstrap-servers", default=None)
    args = parser.parse_args(argv)

    from bench import batch_cost
    from spark_chkpt.kafka.source.offset_reader import OffsetReader
    from spark_chkpt.kafka.source.options import SourceConfig

    topic = f"bench-decode-{int(time.time())}"
    with kafka_broker(args.bootstrap_servers) as servers:
        batch_cost.fill(
            servers=servers, topic=topic, records=args.records, partitions=args.partitions
        )
        reader = OffsetReader(
            config=SourceConfig.from_options(
                {"kafka.bootstrap.servers": servers, "subscribe": topic}
            ),
            client_id="bench-decode",
        )
        ends = reader.latest(reader.partitions())
        reader.close()
        decode = measure(servers=servers, topic=topic, ends=ends, rounds=args.rounds)
    print("\n".join(report_lines(decode)), flush=True)
    print(f"records per wall-second: {decode['per_second']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
