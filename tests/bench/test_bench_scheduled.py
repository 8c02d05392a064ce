"""The scheduled job's row (bench/scheduled.py): each job kind runs the formats it names,
and the report sets the whole job's time and its split beside the target."""

from __future__ import annotations

from bench.scheduled import KINDS, SPLIT, report_lines


def test_each_kind_pairs_ours_with_sparks_own_on_the_same_path() -> None:
    assert KINDS[("delta", "ours")] == ("chkpt-kafka", "chkpt-delta")
    assert KINDS[("delta", "spark")] == ("kafka", "delta")
    assert KINDS[("kafka", "ours")] == ("chkpt-kafka", "chkpt-kafka")
    assert KINDS[("kafka", "spark")] == ("kafka", "kafka")


def test_the_report_gives_the_ratio_against_the_target_and_each_split() -> None:
    split = {k: float(i + 1) for i, k in enumerate(SPLIT)}
    rows = [
        {
            "path": "delta",
            "records": 100_000,
            "ours_s": 10.0,
            "spark_s": 15.0,
            "ratio": 1.5,
            "rounds": 2,
            "ours_split": split,
            "spark_split": split,
        },
        {
            "path": "kafka",
            "records": 1_000_000,
            "ours_s": 20.0,
            "spark_s": 18.0,
            "ratio": 0.9,
            "ours_split": split,
            "spark_split": split,
        },
    ]
    lines = report_lines(rows)
    assert "(the faster of 2 runs each; target: Spark's / ours >= 1.2)" in lines[0]
    assert "Kafka -> Delta 100,000 records: ours 10.0 s, Spark's 15.0 s: 1.50x (met)" in lines[1]
    assert lines[2].split() == [
        "ours",
        "1.0",
        "/",
        "2.0",
        "/",
        "3.0",
        "/",
        "4.0",
        "/",
        "5.0",
        "/",
        "6.0",
    ]
    assert (
        "Kafka -> Kafka 1,000,000 records: ours 20.0 s, Spark's 18.0 s: 0.90x (NOT met)" in lines[4]
    )
