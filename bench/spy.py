"""py-spy over a bench row, and its raw output read back as shares (bench/profile.py).

:func:`sampling` attaches ``py-spy record --subprocesses --format raw`` to this process
for the length of a block: it follows every Python process below it, which includes
Spark's ``pyspark.daemon`` (a child of the JVM, itself a child of this process) and the
workers the daemon forks. :func:`summarize` buckets each sample by its process (from
py-spy's innermost ``process`` frame), by whose code it was in (the innermost frame not
the standard library's: ours, Spark's, the Kafka client's, Arrow's, delta-rs's) and by
what a task was doing (reading, the Kafka sink, the Delta sink, rows to and from the
JVM, pyspark's ``gc.collect()`` after each task). Shares are of samples: active threads
only, so on a loaded machine they are shares of time on or waiting for a CPU.

:func:`log_gc` makes every Python process started afterwards log its full collections
(a ``sitecustomize`` on ``PYTHONPATH``, which Spark passes to its workers).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# Whose code a frame is, by the file py-spy names for it (``--full-filenames``; older
# profiles name files relative to sys.path, and pyspark's own modules by base name only).
OWNERS: tuple[tuple[str, str], ...] = (
    ("ours", r"(^|[(/])(spark_chkpt|connectors|jobs|bench)/"),
    ("kafka client", r"(^|[(/])(kafka|confluent_kafka)/"),
    ("arrow", r"(^|[(/])pyarrow/"),
    ("delta-rs", r"(^|[(/])deltalake/"),
    (
        "spark",
        r"(^|[(/])(pyspark|py4j)/|py4j-[^/]*\.zip|\((daemon|worker|worker_util|serializers|"
        r"accumulators|cloudpickle|datasource_internal|python_streaming_\w+|"
        r"plan_data_source_read|write_into_data_source)\.py:",
    ),
)


def owner(frame: str) -> str:
    """Whose code ``frame`` (``function (path:line)``) is."""
    for name, pattern in OWNERS:
        if re.search(pattern, frame):
            return name
    return "other"


# The Python processes of a row, by what their command line runs; the first match wins.
PROCESSES: tuple[tuple[str, str], ...] = (
    ("worker: tasks", "pyspark.worker"),
    ("source runner", "python_streaming_source_runner"),
    ("sink runner", "python_streaming_sink_runner"),
    ("worker: write planning", "write_into_data_source"),
    ("worker: read planning", "plan_data_source_read"),
    ("worker: other", "pyspark."),
    ("bench process", "bench"),
)


def _process(root: str) -> str:
    """The process of a stack, from py-spy's innermost ``process <pid>:"<cmdline>"`` frame
    (it nests each process under its parent's)."""
    for name, marker in PROCESSES:
        if marker in root:
            return name
    return "other process"


def _leaf_owner(frames: Sequence[str]) -> str:
    """Whose code the sample was in: the innermost frame that is not the standard library's
    (a socket send inside kafka-python is the client's; ``gc.collect`` in pyspark's daemon
    is Spark's)."""
    for frame in reversed(frames):
        who = owner(frame)
        if who != "other":
            return who
    return "other"


# What a task worker was doing, by the innermost frame that says (socket and selector
# frames are kafka-python's network layer, under either its consumer or its producer).
STAGES: tuple[tuple[str, str], ...] = (
    (
        "write: Kafka sink",
        r"spark_chkpt/kafka/sink/|connectors/kafka_sink|kafka/producer/|"
        r"confluent_kafka",
    ),
    (
        "read: Kafka source",
        r"spark_chkpt/kafka/(source|client)/|connectors/kafka_source|"
        r"kafka/consumer/|kafka/record/",
    ),
    ("write: Delta sink", r"spark_chkpt/delta/|connectors/delta|deltalake/"),
    ("Spark: rows to and from the JVM", r"serializers\.py|pyspark/sql/pandas/"),
)


def _gc_line() -> str:
    """``daemon.py:<line>`` of the ``gc.collect()`` pyspark's daemon runs after each task
    of a reused worker (pyspark 4.2.0: line 273)."""
    import pyspark.daemon

    source = Path(pyspark.daemon.__file__).read_text().splitlines()
    line = next((n for n, text in enumerate(source, 1) if "gc.collect()" in text), 0)
    return f"daemon.py:{line})"


def _stage(frames: Sequence[str], gc_line: str) -> str:
    if frames and frames[-1].endswith(gc_line):
        return "Spark: gc.collect() after the task"
    for frame in reversed(frames):
        for name, pattern in STAGES:
            if re.search(pattern, frame):
                return name
    return "other"


def summarize(raw: Path, *, top: int = 12) -> dict[str, Any]:
    """Shares of the samples in ``raw`` (py-spy's raw format): by process, by owner of the
    innermost frame of interest within each process, and the functions most often on top."""
    by_process: Counter[str] = Counter()
    by_owner: dict[str, Counter[str]] = {}
    leaves: dict[str, Counter[str]] = {}
    stages: dict[str, Counter[str]] = {}
    gc_line = _gc_line()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        roots = [f for f in frames if f.startswith("process ")]
        process = _process(roots[-1]) if roots else "bench process"
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        total += count
        by_process[process] += count
        by_owner.setdefault(process, Counter())[_leaf_owner(frames)] += count
        stages.setdefault(process, Counter())[_stage(frames, gc_line)] += count
        if frames:
            leaves.setdefault(process, Counter())[frames[-1]] += count

    def share(n: int, of: int) -> float:
        return round(100 * n / of, 1) if of else 0.0

    return {
        "samples": total,
        "process_pct": {p: share(n, total) for p, n in by_process.most_common()},
        "owner_pct": {
            p: {o: share(n, by_process[p]) for o, n in owners.most_common()}
            for p, owners in by_owner.items()
        },
        "stage_pct": {
            p: {o: share(n, by_process[p]) for o, n in counts.most_common()}
            for p, counts in stages.items()
        },
        "top_frames_pct": {
            p: [(f, share(n, by_process[p])) for f, n in counts.most_common(top)]
            for p, counts in leaves.items()
        },
    }


def summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = [f"{summary['samples']} samples; by process: {summary['process_pct']}"]
    for process, owners in summary["owner_pct"].items():
        lines.append(f"{process}: whose code (innermost frame not the stdlib's), %: {owners}")
        lines.append(f"  what it did, %: {summary['stage_pct'].get(process, {})}")
        for frame, pct in summary["top_frames_pct"].get(process, []):
            lines.append(f"  {pct:5.1f}%  {frame}")
    return lines


@contextlib.contextmanager
def sampling(out: Path | None, *, rate: int, idle: bool) -> Iterator[None]:
    """py-spy on this process and every Python process below it while the block runs."""
    if out is None:
        yield
        return
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    command = [py_spy, "record", "--pid", str(os.getpid()), "--subprocesses"]
    command += ["--format", "raw", "--rate", str(rate), "--output", str(out), "--nonblocking"]
    command.append("--full-filenames")
    if idle:
        command.append("--idle")
    sampler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(2)  # py-spy attaches and finds the subprocesses
    try:
        yield
    finally:
        sampler.send_signal(signal.SIGINT)
        _, err = sampler.communicate(timeout=120)
        if sampler.returncode not in (0, -signal.SIGINT) or not out.exists():
            print(f"[profile] py-spy: {err.decode(errors='replace')[-2000:]}", flush=True)


# Loaded by every Python process Spark starts (through PYTHONPATH) with --gc-log: the CPU
# and wall time of each full (generation 2) collection, one line per collection in a file
# per process. pyspark's daemon runs gc.collect() after every task of a reused worker.
_GC_SITECUSTOMIZE = """\
import gc, os, time
_at = {}
def _chkpt_gc_log(phase, info):
    if info.get("generation") != 2:
        return
    if phase == "start":
        _at["cpu"], _at["wall"] = time.process_time(), time.perf_counter()
    elif _at:
        cpu = (time.process_time() - _at["cpu"]) * 1000
        wall = (time.perf_counter() - _at["wall"]) * 1000
        with open(os.path.join(os.environ["CHKPT_GC_LOG"], str(os.getpid())), "a") as f:
            f.write(f"{cpu:.2f} {wall:.2f} {info.get('collected', 0)}\\n")
        if os.environ.get("CHKPT_GC_FREEZE"):
            gc.freeze()  # an experiment: the next full collection skips what survived this one
gc.callbacks.append(_chkpt_gc_log)
"""


def log_gc(folder: Path, *, freeze: bool = False) -> None:
    """Make every Python process started from here on log its full collections;
    ``freeze``: and move what survives each one to the permanent generation
    (``gc.freeze()``), so that pyspark's per-task ``gc.collect()`` walks only what the
    task made: the floor a fix could reach (frozen cyclic garbage is never freed: an
    experiment, not a setting for a long-running job)."""
    folder.mkdir(parents=True, exist_ok=True)
    site = Path(tempfile.mkdtemp(prefix="chkpt-gc-site-"))
    (site / "sitecustomize.py").write_text(_GC_SITECUSTOMIZE)
    os.environ["CHKPT_GC_LOG"] = str(folder)
    if freeze:
        os.environ["CHKPT_GC_FREEZE"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p
    )


def gc_totals(folder: Path) -> dict[str, Any]:
    """The full collections the processes logged: count, CPU ms in all and the median."""
    cpu = []
    for log_file in folder.iterdir():
        for line in log_file.read_text().splitlines():
            cpu.append(float(line.split()[0]))
    cpu.sort()
    return {
        "collections": len(cpu),
        "processes": len(list(folder.iterdir())),
        "cpu_ms_total": round(sum(cpu)),
        "cpu_ms_median": cpu[len(cpu) // 2] if cpu else None,
    }
