"""The soak's figures from its samples (no job run: the soak itself is measured, never a
timed test)."""

from __future__ import annotations

from typing import Any

from bench.soak import role_of
from bench.soak_figures import Process, figures_of, summary_lines

PY = "/venv/bin/python -m pyspark.daemon"


def test_each_process_of_the_job_gets_its_role() -> None:
    assert role_of("python -m spark_chkpt.jobs.kafka_to_delta", root=True, parent_role=None) == (
        "driver"
    )
    assert (
        role_of(
            "/jvm/bin/java -cp x org.apache.spark.deploy.SparkSubmit",
            root=False,
            parent_role="driver",
        )
        == "jvm"
    )
    sink = f"{PY} pyspark.sql.worker.python_streaming_sink_runner"
    assert role_of(sink, root=False, parent_role="jvm") == "daemon"  # the daemon itself
    assert role_of(sink, root=False, parent_role="daemon") == "sink runner"  # its fork
    assert role_of(f"{PY} pyspark.worker", root=False, parent_role="daemon") == "worker"
    source = "python -m pyspark.sql.streaming.python_streaming_source_runner"
    assert role_of(source, root=False, parent_role="jvm") == "source runner"


def _figures(
    processes: dict[int, Process],
    versions: list[tuple[float, int]],
    *,
    warmup: float,
    minutes: float,
) -> dict[str, Any]:
    """The soak's figures of ``processes`` at 5,000 records/s, every record once."""
    return figures_of(
        processes=processes,
        versions=versions,
        warmup=warmup,
        rate=5000,
        minutes=minutes,
        once={"once": True},
        tracemalloc={},
    )


def test_growth_is_read_from_the_medians_of_the_minute_after_warm_up_and_the_last() -> None:
    # 15 s samples over 6 minutes; a spike in each window must not move the figure
    minutes = [i / 4 for i in range(25)]
    grows = Process(pid=1, role="sink runner", command="x")
    grows.samples = [(m, 100.0 + 2 * m + (50 if i % 4 == 1 else 0)) for i, m in enumerate(minutes)]
    late = Process(pid=2, role="worker", command="y")  # started after the warm-up: left out
    late.samples = [(m, 50.0) for m in minutes if m >= 3]
    figures = _figures(
        {1: grows, 2: late}, [(m, int(100 * m)) for m in minutes], warmup=2.0, minutes=6.0
    )
    (row,) = figures["processes"]
    assert row["role"] == "sink runner"
    assert (row["mb_at_warmup"], row["mb_at_end"]) == (105.5, 111.5)  # the spikes left out
    assert row["mb_per_minute"] == 2.0
    assert row["kb_per_commit"] == round(6 * 1024 / 300, 2)
    assert figures["batches_per_minute"]["after_warmup"] == 100.0


def test_a_run_too_short_for_a_rate_is_summed_up_with_dashes() -> None:
    """One minute with a warm-up of 0.2: the two windows share their samples, so the
    growth has no span and no commits between them; the summary printed ``-`` for none
    of them and raised ``TypeError`` on ``format(None, ">7.2f")``."""
    minutes = [i / 10 for i in range(11)]
    sink = Process(pid=1, role="sink runner", command="x")
    sink.samples = [(m, 200.0) for m in minutes]
    figures = _figures({1: sink}, [(m, 5) for m in minutes], warmup=0.2, minutes=1.0)
    (row,) = figures["processes"]
    assert row["mb_per_minute"] is None and row["kb_per_commit"] is None
    (line,) = [x for x in summary_lines(figures) if x.startswith("sink runner")]
    assert line.split()[-2:] == ["-", "-"], line
