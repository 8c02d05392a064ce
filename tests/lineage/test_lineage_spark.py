"""``spark-chkpt lineage`` on the real two-stage job (``jobs/two_stage.py``): stage A
copies the input topic into the middle topic with barriers (two snapshots of 200
events), stage B reads the middle topic aligned into Delta (one snapshot). The table's
version 0 leads to B's snapshot 0, its offsets of the middle topic, and through A's
barriers to A's snapshots 0 and 1 and their offsets of the input topic, which add up to
every input event once. The two stages run once for the module, in the test session;
the CLI runs as a user runs it, a subprocess from a folder outside the repo without
``PYSPARK_PYTHON``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_chkpt.jobs.two_stage import stage_a, stage_b
from spark_chkpt.kafka.client.topics import create_topic
from spark_chkpt.lineage import trace
from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.integration

EVENTS = 400
PARTITIONS = 2


@dataclass(frozen=True)
class TwoStage:
    servers: str
    input: str
    middle: str
    table: Path
    chk_a: Path
    chk_b: Path


@pytest.fixture(scope="module")
def two_stage(
    spark: SparkSession, bootstrap_servers: str, tmp_path_factory: pytest.TempPathFactory
) -> TwoStage:
    work = tmp_path_factory.mktemp("lineage")
    name = f"lineage-{uuid.uuid4().hex[:6]}"
    run = TwoStage(
        servers=bootstrap_servers,
        input=f"{name}-in",
        middle=f"{name}-mid",
        table=work / "table",
        chk_a=work / "chk-a",
        chk_b=work / "chk-b",
    )
    for topic in (run.input, run.middle):
        create_topic(bootstrap_servers=run.servers, name=topic, partitions=PARTITIONS)
    produce_page_views(
        bootstrap_servers=run.servers,
        topic=run.input,
        first=0,
        count=EVENTS,
        spread_over=PARTITIONS,
    )
    args = argparse.Namespace(
        bootstrap_servers=run.servers,
        input=run.input,
        middle=run.middle,
        table=str(run.table),
        trigger="availableNow",
        max_offsets_per_trigger=EVENTS // 2,
        alignment="aligned",
        alignment_timeout=None,
        source_option=[],
        sink_option=[],
    )
    for stage, checkpoint in ((stage_a, run.chk_a), (stage_b, run.chk_b)):
        args.checkpoint = str(checkpoint)
        query = stage(spark, args)
        assert query.awaitTermination(240)
        assert query.exception() is None, query.exception()
    return run


def input_span(node: dict) -> int:
    [read] = node["sources"]
    return sum(end - int(read["start"].get(p, 0)) for p, end in read["end"].items())


def test_a_version_leads_through_the_barriers_to_each_upstream_snapshot(
    two_stage: TwoStage,
) -> None:
    lineage = trace(
        table=str(two_stage.table),
        version=0,
        bootstrap_servers=two_stage.servers,
        upstream=[str(two_stage.chk_a)],
    )
    doc = lineage.as_dict()
    [writer] = [n for n in doc["snapshots"] if n["stage"] == 0]
    a_id = SparkCheckpoint(location=str(two_stage.chk_a)).query_id()
    b_id = SparkCheckpoint(location=str(two_stage.chk_b)).query_id()
    assert (writer["app_id"], writer["snapshot_id"], writer["rows"]) == (b_id, 0, EVENTS)
    [middle] = writer["sources"]
    assert (middle["topic"], middle["mode"], middle["upstream_app"]) == (
        two_stage.middle,
        "aligned",
        a_id,
    )
    upstream = sorted(
        (n for n in doc["snapshots"] if n["stage"] == 1), key=lambda n: n["snapshot_id"]
    )
    assert [(n["app_id"], n["snapshot_id"]) for n in upstream] == [(a_id, 0), (a_id, 1)]
    assert all(n["read_by"] == f"{b_id}#0" and n["writes"] == two_stage.middle for n in upstream)
    assert [n["rows"] for n in upstream] == [EVENTS // 2, EVENTS // 2]
    # A's snapshots read the input topic back to back: 1 starts where 0 ended, and
    # together they cover every input event once.
    first, second = upstream
    assert second["sources"][0]["start"] == first["sources"][0]["end"]
    assert [input_span(n) for n in upstream] == [EVENTS // 2, EVENTS // 2]
    assert all(n["record"] is not None for n in upstream)  # found in --upstream's store
    # Each barrier of A's snapshot 1 lies inside the offsets B read.
    for p, barrier in second["barriers"].items():
        assert barrier < middle["end"][p]
    assert not [n for n in doc["snapshots"] if n["stage"] == 2]  # the input has no barriers


def test_the_cli_prints_the_walk_from_a_folder_outside_the_repo(
    two_stage: TwoStage, tmp_path: Path
) -> None:
    cli = Path(sys.executable).with_name("spark-chkpt")
    command = [str(cli)] if cli.exists() else [sys.executable, "-m", "spark_chkpt.cli"]
    extra = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    env = user_env(**extra)
    assert "PYSPARK_PYTHON" not in env

    def lineage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, "lineage", str(two_stage.table), *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    text = lineage("--version", "0", "--bootstrap-servers", two_stage.servers)
    assert text.returncode == 0, text.stderr
    print(text.stdout)  # the how-to's example (pytest -s shows it)
    assert "stage 0 (the table's writer)" in text.stdout and "stage 1" in text.stdout
    assert f"read {two_stage.middle} (aligned)" in text.stdout
    assert f"-> {two_stage.middle}, {EVENTS // 2} rows" in text.stdout
    as_json = lineage("--version", "0", "--bootstrap-servers", two_stage.servers, "--json")
    assert as_json.returncode == 0, as_json.stderr
    stages = [n["stage"] for n in json.loads(as_json.stdout)["snapshots"]]
    assert sorted(stages) == [0, 1, 1]
    alone = lineage("--version", "0")  # no broker: the table's writer only, and why
    assert alone.returncode == 0 and "give --bootstrap-servers" in alone.stdout
    missing = lineage("--version", "7")
    assert missing.returncode == 2
    assert "has no version 7 in its history (versions 0..0)" in missing.stderr
