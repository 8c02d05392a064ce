"""The Kafka sink's committable (Flink: ``KafkaCommittable``): what one task attempt
wrote, returned by the writer (:mod:`spark_chkpt.kafka.sink.writer`, phase 1) to the
committer (:mod:`spark_chkpt.kafka.sink.committer`, phase 2), whose barriers confirm
the attempt by its tag."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from spark_chkpt.alignment.barrier import ATTEMPT_HEADER

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
