"""A topic read as plain: its barriers are never rows (spark_chkpt/kafka/source/judge.py)."""

from __future__ import annotations

from spark_chkpt.alignment.barrier import Barrier
from spark_chkpt.kafka.client.consumer import Record
from spark_chkpt.kafka.source.judge import plain_records


def test_plain_records_leave_out_barriers_and_keep_the_rest_in_order() -> None:
    rows = [Record(b"k", b"v%d" % i, i, 0, 0, None) for i in range(3)]
    tagged = Record(b"k", b"t", 3, 0, 0, [("chkpt.attempt", b"a1")])
    barrier = Record(b"b", b"{}", 4, 0, 0, Barrier.headers())
    assert plain_records(rows) == (rows, 0)  # no headers anywhere: the list itself
    assert plain_records([*rows, tagged]) == ([*rows, tagged], 0)
    assert plain_records([rows[0], barrier, *rows[1:]]) == (rows, 1)
