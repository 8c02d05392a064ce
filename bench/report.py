"""The benchmark's printed report: every run's rate, the ratios the targets are set on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.result import Result

_NAMES = {
    "a_raw_kafka_python": "(a') raw kafka-python consumer",
    "a_raw_consumer": "(a) raw {client} consumer",
    "b_exactly_once": "(b) chkpt-kafka -> chkpt-delta, exactly once",
    "c_no_snapshots": "(c) same, alignment=none, no snapshot store",
    "e_no_prefetch": "(e) (b) with prefetchRecords=0",
    "f_ceiling_delta": "(f) ceiling: synthetic source -> chkpt-delta",
    "g_ceiling_noop": "(g) ceiling: synthetic source -> noop",
    "d_write_deltalake": "(d) write_deltalake of the same rows",
}
_PHASES = ("latestOffset", "addBatch", "walCommit", "commitOffsets", "outside_triggers")


def _target(value: float | None, goal: float, *, at_most: bool = False) -> str:
    if value is None:
        return "not measured"
    met = value <= goal if at_most else value >= goal
    return f"{'met' if met else 'NOT met'} ({'<=' if at_most else '>='} {goal:g})"


def _rates(result: Result) -> list[str]:
    lines = [f"{'run':<50}{'seconds':>9}{'records/s':>12}"]
    for key, label in _NAMES.items():
        if key in result.seconds:
            label = label.format(client=result.client)
            lines.append(f"{label:<50}{result.seconds[key]:>9.2f}{result.rate[key]:>12,}")
    for key, cold in result.cold.items():
        label = f"cold {_NAMES[key].split(' ', 1)[0]}, first query of a fresh session"
        rate = round(result.records / cold["seconds"])
        lines.append(f"{label:<50}{cold['seconds']:>9.2f}{rate:>12,}")
    for k2k in result.kafka_to_kafka:
        label = f"k2k chkpt-kafka -> chkpt-kafka, sink {k2k['sink_client']}"
        if k2k.get("delivery", "barriers") != "barriers":
            label = f"k2k Kafka transactions, sink {k2k['sink_client']}"
        rate = round(result.records / k2k["upstream_s"])
        lines.append(f"{label:<50}{k2k['upstream_s']:>9.2f}{rate:>12,}")
        label = f"    its aligned downstream read ({k2k['downstream_rows']:,} rows)"
        rate = round(result.records / k2k["downstream_s"])
        lines.append(f"{label:<50}{k2k['downstream_s']:>9.2f}{rate:>12,}")
    if result.quix:
        label = "Quix Streams exactly-once, json apply -> topic"
        rate = round(result.records / result.quix["seconds"])
        lines.append(f"{label:<50}{result.quix['seconds']:>9.2f}{rate:>12,}")
    return lines


def _p99_target(item: dict[str, Any]) -> int:
    """The latency targets: p99 ≤ 1 s into Delta at 5,000 and 20,000 records/s, ≤ 2 s through two
    jobs (Kafka → Kafka → Delta) at 5,000."""
    return 1000 if item.get("path", "kafka->delta") == "kafka->delta" else 2000


def report(result: Result) -> str:
    from bench.native import report_lines

    r = result.ratios
    lines = _rates(result) + report_lines(result)
    lines.append("")
    lines.append(f"warm (b)/(f) against the ceiling -> chkpt-delta = {r['b/f']:.2f}: ")
    lines[-1] += _target(r["b/f"], 0.9)  # the project's targets from here on
    raw_python = r.get("b/a_kafka_python", r["b/a"] if result.client == "kafka-python" else None)
    lines.append(f"warm (b)/(a raw kafka-python) = {raw_python}: {_target(raw_python, 1.0)}")
    cold = r.get("cold b/f")
    lines.append(f"cold (b)/(f) = {cold}: {_target(cold, 0.8)}")
    k2k = r.get("k2k/quix")
    lines.append(
        f"Kafka -> Kafka (fastest sink client) / Quix Streams = {k2k}: {_target(k2k, 5.0)}"
    )
    txn = r.get("k2k transactions/barriers")
    lines.append(
        f"Kafka -> Kafka, Kafka transactions / barriers (librdkafka) = {txn}: "
        f"{_target(txn, 0.9)}; on kafka-python "
        f"{r.get('k2k transactions/barriers kafka-python', 'not measured')}; "
        f"/ Quix Streams exactly-once = {r.get('k2k transactions/quix', 'not measured')}"
    )
    lines.append(
        f"(b)/(a) = {r['b/a']:.2f}   (f)/(g), chkpt-delta against noop = {r['f/g']:.2f}   "
        f"(b)/(c) = {r['b/c']:.2f} (snapshot overhead {r['snapshot_overhead']:.1%})   "
        f"prefetch gain (b)/(e) = {r['b/e']:.2f}"
    )
    for item in result.latency:
        lines.append(
            f"latency {item.get('path', 'kafka->delta')} at {item['rate']:,} records/s "
            f"({item['records']:,} records, {item['batches']} commits): "
            f"p50 {item['p50_ms']} ms, p99 {item['p99_ms']} ms, max {item['max_ms']} ms"
            + f": p99 {_target(item['p99_ms'], _p99_target(item), at_most=True)}"
        )
    for name in ("b", "c"):
        ms = result.commit_ms[name]
        lines.append(
            f"driver commit latency ({name}, {result.batches[name]} batches): "
            f"p50 {ms['p50']} ms, p99 {ms['p99']} ms"
            + (f": p50 {_target(ms['p50'], 100, at_most=True)}" if name == "b" else "")
        )
    for key in ("b_exactly_once", "c_no_snapshots", "f_ceiling_delta", "g_ceiling_noop"):
        phases = result.breakdown_ms.get(key, {})
        shown = ", ".join(f"{k} {v}" for k, v in sorted(phases.items()) if k in _PHASES)
        lines.append(
            f"Spark phases of ({key[0]}), ms over {phases.get('batches')} batches: {shown}"
        )
    for key, cold_run in result.cold.items():
        phases = cold_run["phases"]
        shown = ", ".join(f"{k} {v}" for k, v in sorted(phases.items()) if k in _PHASES)
        lines.append(
            f"cold ({key[0]}): session start {cold_run['session_s']:.1f} s; phases, ms: {shown}"
        )
    if result.batch_cost:
        cost = result.batch_cost
        shown = ", ".join(f"{k} {v:g}" for k, v in cost["median_ms"].items())
        lines.append(
            f"per-batch fixed cost ({cost['batches']} batches of {cost['per_batch']:,} "
            f"records, median ms): {shown}"
        )
        if cost.get("anatomy"):
            from bench.batch_anatomy import table_lines as anatomy_lines

            total = cost["spark_ms"].get("triggerExecution", 0.0)
            lines += anatomy_lines([tuple(r) for r in cost["anatomy"]], total=total)
    if result.decode:
        from bench.decode import report_lines as decode_lines

        lines += decode_lines(result.decode)
    if result.aligned_read:
        from bench.aligned_read import report_lines as aligned_lines

        lines += aligned_lines(result.aligned_read)
    if result.min_pause:
        from bench.min_pause import report_lines as pause_lines

        lines += pause_lines(result.min_pause)
    lines.append(
        f"peak RSS of a Python worker: {result.worker_peak_rss_mb:.0f} MB"
        if result.worker_peak_rss_mb
        else "peak RSS of Python workers: not found"
    )
    return "\n".join(lines)
