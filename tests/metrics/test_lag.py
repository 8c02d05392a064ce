"""Lag from a progress's endOffset and latestOffset (spark_chkpt.metrics.lag); the
figures are checked against Spark's own Kafka source's metrics in
tests/kafka/source/test_kafka_parity.py."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace
from typing import Any

from spark_chkpt.metrics.lag import (
    LagReporter,
    describe,
    java_double,
    source_lags,
    spark_average,
)


def _progress(*sources: dict[str, Any]) -> dict[str, Any]:
    """A progress as ``query.lastProgress`` gives it (a dict, offsets as JSON strings)."""
    return {
        "id": "q1",
        "name": "events",
        "batchId": 3,
        "numInputRows": 40,
        "processedRowsPerSecond": 80.0,
        "sources": list(sources),
    }


def _source(end: Any, latest: Any, description: str = "chkpt-kafka") -> dict[str, Any]:
    return {
        "description": description,
        "endOffset": json.dumps(end),
        "latestOffset": None if latest is None else json.dumps(latest),
    }


def test_lag_per_partition_and_the_three_figures_spark_reports() -> None:
    end = {"t": {"0": 10, "1": 20}, "__chkpt__": {"topics": {"t": {"mode": "none"}}}}
    latest = {"t": {"0": 15, "1": 20}}
    (lag,) = source_lags(_progress(_source(end, latest)))
    assert lag.partitions == {"t-0": 5, "t-1": 0}
    assert (lag.max, lag.min, lag.avg, lag.behind) == (5, 0, 2.5, 5)
    assert lag.metrics() == {
        "avgOffsetsBehindLatest": "2.5",
        "maxOffsetsBehindLatest": "5",
        "minOffsetsBehindLatest": "0",
    }


def test_a_partition_the_batch_did_not_plan_counts_from_its_start() -> None:
    (lag,) = source_lags(_progress(_source({"t": {"0": 4}}, {"t": {"0": 4, "1": 7}})))
    assert lag.partitions == {"t-0": 0, "t-1": 7}


def test_sources_without_latest_or_kafka_offsets_are_left_out() -> None:
    progress = _progress(
        _source({"t": {"0": 1}}, None),
        _source(5, 9, description="RateStream"),
        _source({"logOffset": 3}, {"logOffset": 4}, description="FileStream"),
    )
    assert source_lags(progress) == []


def test_the_progress_object_spark_hands_a_listener_works_too() -> None:
    source = SimpleNamespace(
        description="chkpt-kafka",
        endOffset=json.dumps({"t": {"0": 1}}),
        latestOffset=json.dumps({"t": {"0": 3}}),
    )
    (lag,) = source_lags(SimpleNamespace(sources=[source]))
    assert lag.behind == 2


def test_the_reporter_prints_one_line_per_batch_whatever_the_logging_setup() -> None:
    out = io.StringIO()
    reporter = LagReporter(stream=out)
    progress = _progress(_source({"t": {"0": 10}}, {"t": {"0": 25}}))
    reporter.onQueryProgress(SimpleNamespace(progress=progress))
    reporter.onQueryProgress(SimpleNamespace(progress=_progress()))  # no source: no line
    line = describe(progress, source_lags(progress))
    assert out.getvalue() == line + "\n"
    assert line == (
        "chkpt events batch 3: 40 rows (80/s); "
        "lag 15 offsets over 1 partitions (max 15 at t-0, avg 15.0, min 15)"
    )
    assert reporter.latest["q1"][0].behind == 15


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_lines_become_a_progress_bar_of_records_read() -> None:
    """An availableNow run of 100 records in batches of 40: the bar is rewritten in place
    (carriage return) and ends its line when nothing is left to read."""
    out = _Terminal()
    reporter = LagReporter(stream=out)
    for end, rows in ((40, 40), (80, 40), (100, 20)):
        progress = _progress(_source({"t": {"0": end}}, {"t": {"0": 100}}))
        progress["numInputRows"] = rows
        reporter.onQueryProgress(SimpleNamespace(progress=progress))
    frames = out.getvalue().split("\r")[1:]
    assert [f.split("] ")[1].split(" records")[0] for f in frames] == [
        "40/100",
        "80/100",
        "100/100",
    ]
    assert not frames[0].endswith("\n") and frames[-1].endswith("(100%), batch 3\n")


def test_not_on_a_terminal_there_is_no_bar() -> None:
    out = io.StringIO()  # a log file, a job's captured output
    LagReporter(stream=out).onQueryProgress(
        SimpleNamespace(progress=_progress(_source({"t": {"0": 1}}, {"t": {"0": 2}})))
    )
    assert "\r" not in out.getvalue() and out.getvalue().startswith("chkpt events batch 3:")


def test_the_average_is_printed_as_sparks_progress_prints_it() -> None:
    """Spark 4.2's Kafka source prints avgOffsetsBehindLatest with Double.toString, and
    its progress JSON rounds that half up to one decimal: 4 partitions 18,001 behind read
    4500.3 (issue 51: ours printed 4500.2, Python rounding half to even)."""
    end = {"t": {"0": 0, "1": 0, "2": 0, "3": 0}}
    latest = {"t": {"0": 4500, "1": 4500, "2": 4500, "3": 4501}}
    (lag,) = source_lags(_progress(_source(end, latest)))
    assert lag.metrics()["avgOffsetsBehindLatest"] == "4500.3"
    latest["t"]["2"] = 4502  # 18,003: a .75 average
    (lag,) = source_lags(_progress(_source(end, latest)))
    assert lag.metrics()["avgOffsetsBehindLatest"] == "4500.8"
    assert "avg 4500.8," in lag.describe()


def test_spark_average_matches_big_decimal_half_up_of_double_to_string() -> None:
    """Java 17's ``new BigDecimal(Double.toString(x)).setScale(1, HALF_UP)`` (run once,
    pasted here): what SourceProgress's JSON holds."""
    java = {
        4500.25: "4500.3",
        2.25: "2.3",
        0.0: "0.0",
        1e7: "10000000.0",
        0.0005: "0.0",
        1 / 3: "0.3",
        0.15: "0.2",
        0.05: "0.1",
        12345678.25: "12345678.3",
        7.5: "7.5",
    }
    assert {v: spark_average(v) for v in java} == java


def test_java_double_matches_double_to_string() -> None:
    """Values printed by Java 17's Double.toString (run once, pasted here)."""
    java = {
        18001 / 4: "4500.25",
        0.0: "0.0",
        5.0: "5.0",
        1e7: "1.0E7",
        12345678.5: "1.23456785E7",
        0.001: "0.001",
        0.0005: "5.0E-4",
        1 / 3: "0.3333333333333333",
        1e21: "1.0E21",
        7 / 3: "2.3333333333333335",
        123456.789: "123456.789",
    }
    assert {v: java_double(v) for v in java} == java


def test_the_source_label_is_the_query_and_its_topics_not_sparks_object_name() -> None:
    """Spark describes a Python source by its object, a new hash every run; the label a
    dashboard keeps is the query's name and the topics."""
    spark_name = "org.apache.spark.sql.execution.python.PythonMicroBatchStream@1bdfa468"
    end = {"b": {"0": 1}, "a": {"0": 1}}
    latest = {"b": {"0": 2}, "a": {"0": 3}}
    (lag,) = source_lags(_progress(_source(end, latest, description=spark_name)))
    assert lag.source == "events[a,b]" and lag.description == spark_name
    nameless = _progress(_source(end, latest, description=spark_name))
    nameless["name"] = None
    assert source_lags(nameless)[0].source == "q1[a,b]"  # the query's id: kept by restarts
    twice = _progress(_source(end, latest), _source(end, latest))
    assert [lag.source for lag in source_lags(twice)] == ["events[a,b]", "events[a,b]#2"]
