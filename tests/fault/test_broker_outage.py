"""The broker freezes mid-run (SIGSTOP, then SIGCONT; never a restart: its storage is in
memory). A pause within the clients' timeouts is waited out; a longer outage fails the
query with one error naming the broker and the timeout to raise, and a restart after the
broker is back goes on. Every event ends in the Delta table exactly once."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_chkpt.kafka.topics import create_topic
from spark_chkpt.local.broker import EmbeddedBroker
from spark_chkpt.local.generator import PAGE_VIEW_SCHEMA_DDL, produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.fault

FIRST, SECOND = 3000, 1000


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    """A broker of this test's own: pausing the session's would stall other tests."""
    with EmbeddedBroker() as own:
        yield own


def job(
    tmp_path: Path, broker: EmbeddedBroker, topic: str, *settings: str, trigger: str
) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "spark_chkpt.jobs.kafka_to_delta",
        "--bootstrap-servers",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--table",
        str(tmp_path / "table"),
        "--checkpoint",
        str(tmp_path / "chk"),
        "--schema",
        PAGE_VIEW_SCHEMA_DDL,
        "--trigger",
        trigger,
        "--max-offsets-per-trigger",
        "500",
        "--master",
        "local[2]",
    ]
    for setting in settings:
        command += ["--set", setting]
    log = open(tmp_path / "job.log", "a")  # noqa: SIM115 - the child's output
    return subprocess.Popen(
        command,
        cwd=tmp_path,
        env=user_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def table_ids(tmp_path: Path) -> list[int]:
    if not (tmp_path / "table" / "_delta_log").exists():
        return []
    table = DeltaTable(str(tmp_path / "table")).to_pyarrow_table(columns=["event_id"])
    return sorted(table.column("event_id").to_pylist())


def wait_for_rows(
    tmp_path: Path, n: int, *, process: subprocess.Popen[str], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while len(table_ids(tmp_path)) < n:
        assert process.poll() is None, (tmp_path / "job.log").read_text()[-4000:]
        assert time.monotonic() < deadline, f"{len(table_ids(tmp_path))} of {n} rows"
        time.sleep(0.5)


def exactly_once(tmp_path: Path, count: int) -> None:
    ids = table_ids(tmp_path)
    assert ids == list(range(count)), (
        f"{len(ids)} rows, {len(set(ids))} distinct, missing "
        f"{sorted(set(range(count)) - set(ids))[:10]}"
    )


def test_a_pause_within_the_timeouts_is_waited_out(broker: EmbeddedBroker, tmp_path: Path) -> None:
    servers = broker.bootstrap_servers
    create_topic(bootstrap_servers=servers, name="views", partitions=3)
    produce_page_views(bootstrap_servers=servers, topic="views", first=0, count=FIRST)
    process = job(tmp_path, broker, "views", trigger="processingTime=1 second")
    try:
        wait_for_rows(tmp_path, 500, process=process, timeout=240)
        broker.pause()
        time.sleep(12)  # several triggers' worth
        broker.resume()
        produce_page_views(bootstrap_servers=servers, topic="views", first=FIRST, count=SECOND)
        wait_for_rows(tmp_path, FIRST + SECOND, process=process, timeout=240)
        assert process.poll() is None, "the query failed instead of waiting"
    finally:
        broker.resume()
        process.terminate()
        process.wait(timeout=60)
    exactly_once(tmp_path, FIRST + SECOND)


def test_an_outage_longer_than_the_timeouts_fails_clearly_and_a_restart_goes_on(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    servers = broker.bootstrap_servers
    create_topic(bootstrap_servers=servers, name="views", partitions=3)
    produce_page_views(bootstrap_servers=servers, topic="views", first=0, count=FIRST)
    short = (
        "source.kafka.bootstrap.timeout.ms=5000",
        "source.kafka.request.timeout.ms=5000",
        "source.kafkaConsumer.pollTimeoutMs=5000",
    )
    process = job(tmp_path, broker, "views", *short, trigger="processingTime=1 second")
    try:
        wait_for_rows(tmp_path, 500, process=process, timeout=240)
        broker.pause()
        code = process.wait(timeout=180)
    finally:
        broker.resume()
        if process.poll() is None:
            process.kill()
    assert code != 0
    log = (tmp_path / "job.log").read_text()
    errors = [line for line in log.splitlines() if "BrokerUnavailableError: " in line]
    assert errors, log[-4000:]
    assert servers in errors[-1] and "timeout.ms=5000" in errors[-1], errors[-1]
    committed = len(table_ids(tmp_path))
    assert 500 <= committed < FIRST
    # The broker is back: a restart goes on from the last snapshot, exactly once.
    produce_page_views(bootstrap_servers=servers, topic="views", first=FIRST, count=SECOND)
    again = job(tmp_path, broker, "views", trigger="availableNow")
    assert again.wait(timeout=300) == 0, (tmp_path / "job.log").read_text()[-4000:]
    exactly_once(tmp_path, FIRST + SECOND)
