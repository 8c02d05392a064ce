"""``make bench``'s rows of how cost grows (bench/growth.py): the plan runs every row of
issue 52, each row's figures come back by name from a real process, a failing row is
named and does not stop the others, and the summary sets each target beside its figure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.growth import Row, plan, run, summary_lines
from bench.pipeline import main


def test_the_plan_runs_every_row_on_the_client_and_quix_given() -> None:
    rows = plan(client="confluent", quix_python="/q/bin/python", repeat=2)
    assert [r.name for r in rows] == [
        "aged_table",
        "kafka_age",
        "partitions",
        "partitions_spark",
        "planning",
        "k2k_shapes",
        "quix",
        "scheduled",
    ]
    by_name = {r.name: " ".join(r.argv) for r in rows}
    assert "--aged-versions 1000,10000,100000 --aged-rewritten 10000" in by_name["aged_table"]
    assert "--client confluent" in by_name["aged_table"]
    assert "--snapshots 1000,100000" in by_name["kafka_age"]
    # Ours and Spark's own each in a process of their own: delta-spark's runs slowed
    # ours' in one session.
    assert "--counts 4,64 --client confluent" in by_name["partitions"]
    assert "--native" not in by_name["partitions"]
    assert "--counts 4,64 --native-only" in by_name["partitions_spark"]
    assert "--partitions 1000" in by_name["planning"]
    assert "--k2k-shapes-only --repeat 2" in by_name["k2k_shapes"]
    assert "--ours --runs 3 --quix-python /q/bin/python" in by_name["quix"]
    no_quix = {r.name: " ".join(r.argv) for r in plan(client="x", quix_python=None, repeat=1)}
    assert "--quix-python" not in no_quix["quix"]
    assert "-m bench.scheduled --records 100000 1000000" in by_name["scheduled"]


def test_each_rows_figures_come_back_and_a_failing_row_is_named(tmp_path: Path) -> None:
    write = (
        "import json, sys; out = sys.argv[sys.argv.index('--json') + 1]; "
        "open(out, 'w').write(json.dumps([{'snapshots': 100001, 'ratio': 0.97}]))"
    )
    rows = [
        Row("kafka_age", ("-c", write)),
        Row("planning", ("-c", "import sys; sys.exit(3)")),
        Row("k2k_shapes", ("-c", "pass")),  # exits 0 but writes no figures
    ]
    figures = run(rows=rows, workdir=tmp_path, python=sys.executable)
    assert figures["kafka_age"] == [{"snapshots": 100001, "ratio": 0.97}]
    assert figures["failed"] == {"planning": 3, "k2k_shapes": 0}
    assert set(figures["seconds"]) == {"kafka_age", "planning", "k2k_shapes"}
    lines = summary_lines(figures)
    assert "  restart after 100,001 snapshots: 0.97x a young query's (target <= 1.2)" in lines
    assert any("planning: failed (exit 3)" in line for line in lines)
    assert any("Kafka -> Kafka by shape: failed (exit 0)" in line for line in lines)
    assert any("a table's age: not run" in line for line in lines)
    partial = summary_lines(
        {
            "failed": {"partitions_spark": 1},
            "partitions": [
                {"label": "4 partitions", "records_per_s": 40_000},
                {"label": "64 partitions", "records_per_s": 40_000},
            ],
        }
    )
    assert (
        "  64 partitions: 1.00x of 4 partitions' rate (target >= 0.9); "
        "Spark's kafka -> delta: failed (exit 1)" in partial
    )


def test_the_summary_sets_each_target_beside_its_figure() -> None:
    figures = {
        "failed": {},
        "aged_table": {
            "per_batch": 500,
            "rounds": 2,
            "10000": {"versions": 10_000, "ratio": 1.04},
            "100000": {"versions": 100_000, "ratio": 1.2},
            "rewritten": {"versions": 10_000, "ratio": 1.3, "rewritten": True},
        },
        "partitions": [
            {"label": "4 partitions", "records_per_s": 40_000},
            {"label": "64 partitions", "records_per_s": 38_000},
        ],
        "partitions_spark": [
            {"label": "4 partitions, Spark kafka → delta", "records_per_s": 20_000},
            {"label": "64 partitions, Spark kafka → delta", "records_per_s": 10_000},
        ],
        "planning": [
            {"label": "1000 partitions, plain", "batch_ms_p50": 63.0, "batch_ms_max": 98.0},
        ],
        "k2k_shapes": [
            {"ratio": 0.8, "after_first_ratio": 1.1},
            {"ratio": 0.6, "after_first_ratio": 0.9},
        ],
        "quix": {
            "quix": [{"steady_rps": 40_000}, {"steady_rps": 44_000}],
            "ours": [{"steady_rps": 44_000}, {"steady_rps": 48_000}],
        },
        "scheduled": [
            {"path": "delta", "records": 100_000, "ours_s": 12.0, "spark_s": 18.0, "ratio": 1.5},
            {"path": "kafka", "records": 100_000, "ours_s": 16.0, "spark_s": 12.0, "ratio": 0.75},
        ],
    }
    text = "\n".join(summary_lines(figures))
    assert "table of 10,000 versions: 1.04x a fresh table's batch (target <= 1.1)" in text
    assert "table of 100,000 versions: 1.20x a fresh table's batch (target <= 1.25)" in text
    assert "table of 10,000 rewritten meanwhile: 1.30x a fresh table's batch\n" in text
    assert "64 partitions: 0.95x of 4 partitions' rate (target >= 0.9); Spark's" in text
    assert "kafka -> delta 0.50x" in text
    assert "plain p50 63.0 / max 98.0 ms (target <= 100 ms)" in text
    assert (
        "2 shapes: whole query 0.60-0.80 (target >= 1.0); after the first batch 0.90-1.10" in text
    )
    assert "40,000-44,000 records/s, spread 10% (target <= 15%)" in text
    assert "ours 44,000-48,000, 1.00-1.20x (target >= 1.5)" in text
    assert (
        "scheduled availableNow job, Kafka -> Delta 100,000 records, process start to exit: "
        "ours 12.0 s, Spark's 18.0 s, 1.50x (target >= 1.2)" in text
    )
    assert "Kafka -> Kafka 100,000 records, process start to exit: ours 16.0 s" in text
    assert "the scheduled job: not run" not in text
    assert "the scheduled job: not run" in "\n".join(summary_lines({"failed": {}}))


def test_growth_only_runs_the_rows_alone_and_fails_when_a_row_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.growth as growth

    failing = [Row("planning", ("-c", "import sys; sys.exit(2)"))]
    monkeypatch.setattr(growth, "plan", lambda **_: failing)
    out = tmp_path / "result.json"
    code = main(["--growth-only", "--workdir", str(tmp_path), "--json", str(out)])
    assert code == 1
    assert '"planning": 2' in out.read_text()
