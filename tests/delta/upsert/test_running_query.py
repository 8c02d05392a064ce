"""Which query runs a ``DeltaUpsert``'s ``foreachBatch`` on Spark Connect, where the
batch's session has no SparkContext and no query thread properties: the session's
active queries stand in."""

from __future__ import annotations

from types import SimpleNamespace

from spark_chkpt.delta.upsert.front import _running_query


class _ConnectSession:
    """A Spark Connect session (by its module) whose ``streams.active`` are ``ids``."""

    __module__ = "pyspark.sql.connect.session"

    def __init__(self, *ids: str) -> None:
        self.streams = SimpleNamespace(active=[SimpleNamespace(id=i) for i in ids])

    @property
    def sparkContext(self) -> object:
        raise AttributeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext")


def test_one_active_query_is_the_one_running() -> None:
    assert _running_query(_ConnectSession("q1"), "q1") == "q1"
    assert _running_query(_ConnectSession("q2"), "q1") == "q2"


def test_with_several_the_checkpoints_query_must_be_among_them() -> None:
    assert _running_query(_ConnectSession("q2", "q1"), "q1") == "q1"
    assert _running_query(_ConnectSession("q3", "q2"), "q1") == "one of q2, q3"


def test_no_active_query_is_a_call_outside_a_query() -> None:
    assert _running_query(_ConnectSession(), "q1") is None
