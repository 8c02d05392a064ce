"""The Kafka sink's committable (Flink: ``KafkaCommittable``): what one task attempt
wrote, returned by the writer (:mod:`spark_chkpt.kafka.sink.writer`, phase 1) to the
committer (:mod:`spark_chkpt.kafka.sink.committer`, phase 2), whose barriers confirm
the attempt by its tag."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_chkpt.alignment.barrier import ATTEMPT_HEADER

if TYPE_CHECKING:
    from spark_chkpt.kafka.sink.options import KafkaSinkConfig

Header = tuple[str, bytes]


@dataclass
class ProducedOutput:
    """What one task attempt wrote; Spark returns it to the driver's ``commit``."""

    attempt: str
    batch_id: int | None
    task: int
    counts: dict[str, dict[int, int]] = field(default_factory=dict)  # topic -> partition -> n
    # delivery "exactly-once-transactions": the attempt's open transaction, as
    # (transactional id, producer id, producer epoch), which the driver commits or aborts
    transaction: tuple[str, int, int] | None = None

    @property
    def rows(self) -> int:
        return sum(n for parts in self.counts.values() for n in parts.values())

    @classmethod
    def start(cls, *, batch_id: int | None, task: int) -> ProducedOutput:
        """A new attempt: its tag is what the barriers of its snapshot will name."""
        return cls(attempt=uuid.uuid4().hex[:12], batch_id=batch_id, task=task)

    @property
    def tag(self) -> Header:
        """The ``chkpt.attempt`` header every record of this attempt carries."""
        return (ATTEMPT_HEADER, self.attempt.encode("ascii"))


class AttemptProducer:
    """What a task attempt's producer starts with on either client (the
    :class:`~spark_chkpt.kafka.sink.writer.RecordProducer` s): the sink's ``config``, the
    attempt's ``output`` and the tag its records carry; then the client's own start,
    ``extra`` its producer settings on top of the sink's (a transactional id)."""

    def __init__(
        self,
        *,
        config: KafkaSinkConfig,
        batch_id: int | None,
        task: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.output = ProducedOutput.start(batch_id=batch_id, task=task)
        self._tag: Header = self.output.tag
        self._start(batch_id=batch_id, extra=extra or {})

    def _start(self, *, batch_id: int | None, extra: dict[str, Any]) -> None:
        """The client's producer, opened (each client its own)."""
        raise NotImplementedError
