"""The snapshot reporter's memory over a long query: what it keeps per batch is bounded."""

from __future__ import annotations

import json
from types import SimpleNamespace

from spark_chkpt.metrics.reporter import SnapshotReporter
from spark_chkpt.offsets import META_KEY


def _aligned_progress(batch_id: int) -> SimpleNamespace:
    """A progress event of a batch that read one topic with barriers (an alignment report)."""
    end = {"events": {"0": 10 * batch_id}, META_KEY: {"topics": {"events": {"mode": "aligned"}}}}
    return SimpleNamespace(
        id="q-1",
        name="q",
        batchId=batch_id,
        sources=[SimpleNamespace(endOffset=json.dumps(end), numInputRows=10)],
        observedMetrics={},
    )


def test_the_alignment_reports_of_a_long_query_are_bounded() -> None:
    reporter = SnapshotReporter(keep=50, print_lines=False)
    for batch_id in range(2_000):
        reporter.onQueryProgress(SimpleNamespace(progress=_aligned_progress(batch_id)))
    runs = reporter.alignment["q-1"]
    assert len(runs) == 50
    assert [r["batch"] for r in runs] == list(range(1_950, 2_000))  # the newest kept
    assert runs[-1]["mode"] == "aligned"
