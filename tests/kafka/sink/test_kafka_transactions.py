"""``delivery=exactly-once-transactions``, pure parts: the options and the timeout rule
refused at ``start()``, the transactional ids, the intent entry's transactions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spark_chkpt.alignment.barrier import IndexEntry
from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.sink.transactional import (
    ATTEMPT_SLOTS,
    every_transactional_id,
    transactional_id,
)

BASE = {"kafka.bootstrap.servers": "b:9092", "checkpointLocation": "/chk", "topic": "out"}
TXN = {**BASE, "delivery": "exactly-once-transactions"}


def test_barriers_stay_the_default_delivery() -> None:
    config = KafkaSinkConfig.from_options(BASE)
    assert (config.delivery, config.barriers, config.transactional) == ("barriers", True, False)
    assert "transaction_timeout_ms" not in config.producer_settings


def test_transactions_default_to_no_barriers_and_a_timeout_the_rule_accepts() -> None:
    config = KafkaSinkConfig.from_options(TXN)
    assert config.transactional and not config.barriers
    assert config.transaction_timeout_ms == 900_000
    assert config.transaction_timeout_ms >= (
        config.max_batch_duration_ms + config.max_restart_time_ms
    )
    both = KafkaSinkConfig.from_options({**TXN, "barriers": "true"})
    assert both.transactional and both.barriers


def test_a_timeout_shorter_than_batch_plus_restart_is_refused_naming_the_options() -> None:
    with pytest.raises(ConfigError) as e:
        KafkaSinkConfig.from_options({**TXN, "kafka.transaction.timeout.ms": "60000"})
    message = str(e.value)
    assert "kafka.transaction.timeout.ms" in message and "60000" in message
    assert "maxBatchDuration" in message and "maxRestartTime" in message
    accepted = KafkaSinkConfig.from_options(
        {
            **TXN,
            "kafka.transaction.timeout.ms": "60000",
            "maxBatchDuration": "20s",
            "maxRestartTime": "40s",
        }
    )
    assert accepted.transaction_timeout_ms == 60_000
    with pytest.raises(ConfigError, match=r"kafka\.transaction\.timeout\.ms"):
        KafkaSinkConfig.from_options(
            {
                **TXN,
                "kafka.transaction.timeout.ms": "60000",
                "maxRestartTime": "41s",
                "maxBatchDuration": "20s",
            }
        )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({k: v for k, v in TXN.items() if k != "topic"}, "topic"),
        ({**BASE, "barriers": "false"}, "barriers"),
        ({**BASE, "delivery": "exactly-once"}, "delivery"),
        ({**TXN, "kafka.transactional.id": "mine"}, "kafka.transactional.id"),
    ],
)
def test_bad_combinations_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as e:
        KafkaSinkConfig.from_options(options)
    assert named in str(e.value)


def test_transactional_ids_reuse_a_bounded_set_of_slots() -> None:
    first = transactional_id(app_id="q1", topic="out", partition=2, attempt=0)
    assert first == "chkpt-q1-out-2-0"
    # a later attempt of the same slot is the same id: its initTransactions fences it
    assert transactional_id(app_id="q1", topic="out", partition=2, attempt=ATTEMPT_SLOTS) == first
    every = every_transactional_id(app_id="q1", topic="out", partitions=3)
    assert len(every) == len(set(every)) == 3 * ATTEMPT_SLOTS
    assert first in every
    assert transactional_id(app_id="q1", topic="a b/c", partition=0, attempt=1) == (
        "chkpt-q1-a_b_c-0-1"
    )


def test_the_intent_entry_keeps_its_transactions() -> None:
    entry = IndexEntry(
        kind="intent",
        app_id="q1",
        snapshot_id=4,
        topic="out",
        attempts=("a1",),
        counts={0: 5},
        transactions=(("chkpt-q1-out-0-0", 7, 3),),
    )
    back = IndexEntry.parse(entry.value(), topic="__chkpt.out", partition=0, offset=9)
    assert back.transactions == (("chkpt-q1-out-0-0", 7, 3),)
    plain = IndexEntry(kind="intent", app_id="q1", snapshot_id=4, topic="out", attempts=())
    assert b"transactions" not in plain.value()
    assert IndexEntry.parse(plain.value(), topic="c", partition=0, offset=0).transactions == ()


def test_a_void_intent_says_so() -> None:
    entry = IndexEntry(
        kind="intent",
        app_id="q1",
        snapshot_id=4,
        topic="out",
        attempts=("a1",),
        transactions=(("chkpt-q1-out-0-0", 7, 3),),
        void=True,
    )
    back = IndexEntry.parse(entry.value(), topic="__chkpt.out", partition=0, offset=9)
    assert back.void and back.transactions == entry.transactions
    assert not IndexEntry.parse(
        replace(entry, void=False).value(), topic="c", partition=0, offset=0
    ).void


class Entries:
    """Stands in for a ControlTopic: only its entries are read."""

    def __init__(self, *entries: IndexEntry) -> None:
        self.entries = list(entries)

    def live(self) -> list[IndexEntry]:  # no revocations among them
        return self.entries


def test_the_open_intent_is_the_newest_unless_void() -> None:
    from spark_chkpt.kafka.sink.transaction_steps import open_intent

    def intent(n: int, **kw: object) -> IndexEntry:
        return IndexEntry(kind="intent", app_id="q1", snapshot_id=n, topic="out", **kw)  # type: ignore[arg-type]

    first = intent(4, attempts=("a",), transactions=(("t", 1, 0),))
    void = replace(first, void=True)
    again = intent(4, attempts=("b",), transactions=(("t", 1, 2),))
    assert open_intent(Entries(first), app_id="q1", batch_id=4) == first  # type: ignore[arg-type]
    assert open_intent(Entries(first, void), app_id="q1", batch_id=4) is None  # type: ignore[arg-type]
    assert open_intent(Entries(first, void, again), app_id="q1", batch_id=4) == again  # type: ignore[arg-type]
    assert open_intent(Entries(first), app_id="q2", batch_id=4) is None  # type: ignore[arg-type]


def test_an_intent_a_rewind_revoked_is_not_open() -> None:
    """After a savepoint rewind to snapshot 3, the revoked timeline's intent of batch 4
    is neither finished by ``resume`` nor compared with the restored query's batch 4
    (which read other offsets): only the new generation's intent counts."""
    from spark_chkpt.alignment.index import BarrierIndex
    from spark_chkpt.kafka.sink.transaction_steps import open_intent

    old = IndexEntry(
        kind="intent", app_id="q1", snapshot_id=4, topic="out", attempts=("a",), offset=5
    )
    revoke = IndexEntry(
        kind="revoke",
        app_id="q1",
        snapshot_id=3,
        topic="out",
        attempts=("a",),
        positions={0: 40},
        starts={0: 20},
        revoked=(4,),
        generation=1,
        offset=6,
    )
    new = replace(old, attempts=("b",), generation=1, offset=7)
    index = BarrierIndex(data_topic="out")
    index.add([old, revoke])
    assert open_intent(index, app_id="q1", batch_id=4) is None  # type: ignore[arg-type]
    index.add([new])
    assert open_intent(index, app_id="q1", batch_id=4) == new  # type: ignore[arg-type]
