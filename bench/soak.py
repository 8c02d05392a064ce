"""The query that runs for months, compressed: memory of every long-lived process over time.

The Kafka → Delta job runs as a user runs it (``python -m spark_chkpt.jobs.kafka_to_delta``,
a process of its own, ``processingTime=0``) while a paced producer sends page views at
``rate`` records/s for ``minutes``. Every ``sample_s`` seconds the resident set (VmRSS) of
each process under the job is read from ``/proc``: the driver, its JVM, Spark's Python
daemon and workers, and the long-lived runners (``python_streaming_sink_runner``, the
driver side of the sink, alive for the query's life; ``python_streaming_source_runner``),
with the table's version (the batches committed). At the end every record must be in the
table exactly once (its ``event_id``).

The figures: each process's RSS at the end of the warm-up and at the end, the growth in
per cent, per minute and per commit, and the batch rate per minute. ``tracemalloc=True``
(``--tracemalloc``, slower: a diagnosis, not a figure) starts every Python process of the
job with tracemalloc on, snapshots each at the end of the warm-up and at the end (SIGUSR1,
through a ``sitecustomize`` on the job's ``PYTHONPATH``) and names the lines whose
allocations grew most in between.

    python -m bench.soak --rate 5000 --minutes 12 --warmup 3 --json soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.soak_figures import Process, figures_of, reloaded, summary_lines, tracemalloc_top

# Started in every Python process of the job by --tracemalloc: SIGUSR1 writes a snapshot.
_SITECUSTOMIZE = """\
import os, signal, tracemalloc
_dir = os.environ.get("SOAK_TRACEMALLOC_DIR")
if _dir:
    tracemalloc.start(int(os.environ.get("SOAK_TRACEMALLOC_FRAMES", "1")))
    _count = [0]

    def _dump(signum, frame):
        _count[0] += 1
        tracemalloc.take_snapshot().dump(
            os.path.join(_dir, "%d-%d.tm" % (os.getpid(), _count[0]))
        )

    signal.signal(signal.SIGUSR1, _dump)
"""


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _read(f"/proc/{name}/stat")
        if stat is None:
            continue
        ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _rss_mb(pid: int) -> float | None:
    status = _read(f"/proc/{pid}/status")
    for line in (status or b"").splitlines():
        if line.startswith(b"VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def role_of(command: str, *, root: bool, parent_role: str | None) -> str:
    """The role of a process of the job from its command line (and its parent's role)."""
    if root:
        return "driver"
    kind = (
        "sink runner"
        if "python_streaming_sink_runner" in command
        else "source runner"
        if "python_streaming_source_runner" in command
        else "worker"
    )
    if "pyspark.daemon" in command:  # the daemon's forks have its command line
        return kind if parent_role is not None and parent_role.startswith("daemon") else "daemon"
    if kind != "worker":
        return kind
    if command.split(" ", 1)[0].endswith("java"):
        return "jvm"
    return "python" if "python" in command else "other"


def job_processes(root: int) -> list[tuple[int, str, str]]:
    """``(pid, role, command)`` of ``root`` and every process under it."""
    tree = _children()
    found: list[tuple[int, str, str]] = []
    todo: list[tuple[int, str | None]] = [(root, None)]
    while todo:
        pid, parent_role = todo.pop()
        raw = _read(f"/proc/{pid}/cmdline")
        if raw is None:
            continue
        command = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        role = role_of(command, root=pid == root, parent_role=parent_role)
        found.append((pid, role, command))
        todo.extend((child, role) for child in tree.get(pid, []))
    return found


def _versions(table: Path) -> int:
    log = table / "_delta_log"
    return sum(1 for p in log.glob("*.json")) if log.is_dir() else 0


def _producer(servers: str, topic: str, rate: int, seconds: float, stop: threading.Event) -> int:
    """Send ``rate`` page views a second for ``seconds`` (10 ms steps); the count sent."""
    import confluent_kafka

    from spark_chkpt.testing.generator import PageViews

    views = PageViews(seed=7)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": servers, "linger.ms": 5, "acks": "all"}
    )
    total, sent, started = int(rate * seconds), 0, time.monotonic()
    while sent < total and not stop.is_set():
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        for key, value in views.events(sent, due - sent):
            while True:
                try:
                    producer.produce(topic, value=value, key=key)
                    break
                except BufferError:
                    producer.poll(0.01)
        sent = due
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(60)
    return sent


def _check_once(table: Path, sent: int) -> dict[str, Any]:
    """Every event id the producer sent, in the table exactly once."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    ids = DeltaTable(str(table)).to_pyarrow_table(columns=["event_id"]).column(0)
    distinct = len(pc.unique(ids))
    return {
        "rows": len(ids),
        "distinct": distinct,
        "sent": sent,
        "once": len(ids) == distinct == sent
        and (sent == 0 or (pc.min(ids).as_py() == 0 and pc.max(ids).as_py() == sent - 1)),
    }


def run(
    *,
    workdir: Path,
    rate: int = 5000,
    minutes: float = 12.0,
    warmup: float = 3.0,
    sample_s: float = 15.0,
    partitions: int = 4,
    servers: str | None = None,
    python: str = sys.executable,
    tracemalloc: bool = False,
    settings: Sequence[str] = (),
) -> dict[str, Any]:
    """Run the soak (see the module docstring); the figures as a dict."""
    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL
    from spark_chkpt.testing.kafka_broker import EmbeddedKafka

    broker = None
    if servers is None:
        broker = EmbeddedKafka().start()
        servers = broker.bootstrap_servers
    job: subprocess.Popen[bytes] | None = None
    stop = threading.Event()
    try:
        topic = f"soak-{rate}-{int(time.time())}"
        create_topic(bootstrap_servers=servers, name=topic, partitions=partitions)
        table, checkpoint = workdir / "table", workdir / "checkpoint"
        env = dict(os.environ)
        tm_dir = workdir / "tracemalloc"
        if tracemalloc:
            tm_dir.mkdir(parents=True, exist_ok=True)
            site = Path(tempfile.mkdtemp(prefix="soak-site-"))
            (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
            env["SOAK_TRACEMALLOC_DIR"] = str(tm_dir)
        command = [
            python,
            "-m",
            "spark_chkpt.jobs.kafka_to_delta",
            "--bootstrap-servers",
            servers,
            "--topic",
            topic,
            "--table",
            str(table),
            "--checkpoint",
            str(checkpoint),
            "--schema",
            PAGE_VIEW_SCHEMA_DDL,
            "--trigger",
            "processingTime=0 seconds",
            "--set",
            "job.queryName=soak",
        ]
        for setting in settings:
            command += ["--set", setting]
        log_path = workdir / "job.log"
        with open(log_path, "wb") as job_log:
            job = subprocess.Popen(
                command,
                stdout=job_log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=workdir,  # a user's folder, not the checkout
                start_new_session=True,
            )
        deadline = time.monotonic() + 300
        while _versions(table) == 0:  # the first (empty) batch: the query is polling
            if job.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the soak's job did not start a batch; see {log_path}")
            time.sleep(0.5)
        sent_box: list[int] = []
        producer = threading.Thread(
            target=lambda: sent_box.append(_producer(servers, topic, rate, minutes * 60, stop)),
            daemon=True,
        )
        started = time.monotonic()
        load_at_start = os.getloadavg()
        producer.start()
        processes: dict[int, Process] = {}
        versions: list[tuple[float, int]] = []
        snapped = 0
        while True:
            minute = (time.monotonic() - started) / 60
            for pid, role, command_line in job_processes(job.pid):
                rss = _rss_mb(pid)
                if rss is None:
                    continue
                proc = processes.setdefault(pid, Process(pid=pid, role=role, command=command_line))
                proc.samples.append((round(minute, 3), round(rss, 1)))
            versions.append((round(minute, 3), _versions(table)))
            if tracemalloc and snapped == 0 and minute >= warmup:
                snapped = _signal_pythons(processes)
            if job.poll() is not None:
                raise RuntimeError(f"the soak's job exited ({job.returncode}); see {log_path}")
            if not producer.is_alive():
                break
            time.sleep(max(0.0, sample_s - ((time.monotonic() - started) % sample_s)))
        sent = sent_box[0] if sent_box else 0
        deadline = time.monotonic() + 300
        from bench.latency import _rows_committed

        while _rows_committed(table) < sent:
            if job.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the soak's job fell behind or failed; see {log_path}")
            time.sleep(1)
        tops: dict[str, Any] = {}
        if tracemalloc:
            _signal_pythons(processes)
            time.sleep(20)  # the dumps of large heaps
            tops = tracemalloc_top(tm_dir, processes, top=15)
    finally:
        stop.set()
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
            try:
                job.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
        if broker is not None:
            broker.stop()
    figures = figures_of(
        processes=processes,
        versions=versions,
        warmup=warmup,
        rate=rate,
        minutes=minutes,
        once=_check_once(table, sent),
        tracemalloc=tops,
    )
    figures["load_average_at_start"] = load_at_start
    figures["live_files"] = _live_files(table)
    return figures


def _live_files(table: Path) -> int:
    """The files of the table's latest version (bounded with ``--auto-compact``)."""
    from deltalake import DeltaTable

    return len(DeltaTable(str(table)).file_uris())


def _signal_pythons(processes: dict[int, Process]) -> int:
    count = 0
    for pid, proc in processes.items():
        if proc.role not in ("jvm", "other"):
            try:
                os.kill(pid, signal.SIGUSR1)
                count += 1
            except ProcessLookupError:
                pass
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--sample-seconds", type=float, default=15.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--set", action="append", default=[], help="a job setting (repeatable)")
    parser.add_argument(
        "--auto-compact",
        action="store_true",
        help="the sink's auto compaction on (sink.autoCompact=true)",
    )
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--report", default=None, help="print the figures of an earlier run's --json again"
    )
    args = parser.parse_args(argv)
    if args.report:
        for line in summary_lines(reloaded(json.loads(Path(args.report).read_text()))):
            print(line, flush=True)
        return 0
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    figures = run(
        workdir=workdir,
        rate=args.rate,
        minutes=args.minutes,
        warmup=args.warmup,
        sample_s=args.sample_seconds,
        partitions=args.partitions,
        servers=args.bootstrap_servers,
        tracemalloc=args.tracemalloc,
        settings=[*args.set, *(["sink.autoCompact=true"] if args.auto_compact else [])],
    )
    for line in summary_lines(figures):
        print(line, flush=True)
    print(f"table files at the end: {figures['live_files']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0 if figures["once"]["once"] else 1


if __name__ == "__main__":
    sys.exit(main())
