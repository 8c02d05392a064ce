"""The ``chkpt-kafka`` format: Spark's Kafka options and schema, read with kafka-python."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.types import StructType

from spark_chkpt.kafka.source.options import SourceConfig
from spark_chkpt.kafka.source.records import spark_schema_ddl
from spark_chkpt.options import parse_bool
from spark_chkpt.runtime.report import reported
from spark_chkpt.runtime.worker_heap import freeze_imports


class KafkaDataSource(DataSource):
    """``format("chkpt-kafka")``: drop-in for ``format("kafka")`` as source and sink."""

    # The task slots of the session this class was registered with (see for_session).
    task_slots: int | None = None
    # That session's spark.speculation (a SparkContext setting, fixed for its life).
    speculation: bool = False

    @classmethod
    def name(cls) -> str:
        return "chkpt-kafka"

    @classmethod
    def for_session(
        cls, *, task_slots: int | None, speculation: bool = False
    ) -> type[KafkaDataSource]:
        """This format as registered with one session: reads size their tasks to its
        ``task_slots``; the sink refuses ``delivery=exactly-once-transactions`` when its
        ``spark.speculation`` is on. Spark ships the registered class to its Python
        workers by value, so the figures travel with it."""
        return type(
            cls.__name__,
            (cls,),
            {"task_slots": task_slots, "speculation": speculation, "__doc__": cls.__doc__},
        )

    def _config(self, *, streaming: bool | None) -> SourceConfig:
        return SourceConfig.from_options(
            self.options, streaming=streaming, task_slots=self.task_slots
        )

    @reported
    def schema(self) -> str:
        # Spark calls this at load() on the driver: validate every option here so a bad
        # one fails the user's load() call, not a task on an executor later.
        self._config(streaming=None)
        return spark_schema_ddl(
            include_headers=parse_bool(
                "includeHeaders", self.options.get("includeHeaders"), default=False
            )
        )

    @reported
    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_chkpt.connectors.kafka_source import KafkaBatchReader

        return KafkaBatchReader(config=self._config(streaming=False))

    @reported
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_chkpt.connectors.kafka_source import KafkaStreamReader

        return KafkaStreamReader(config=self._config(streaming=True), options=dict(self.options))

    @reported
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        freeze_imports()  # Spark asks in a reused daemon worker, once per batch
        from spark_chkpt.connectors.kafka_sink import KafkaStreamWriter
        from spark_chkpt.kafka.sink.assembler import KafkaSink

        return KafkaStreamWriter(
            sink=KafkaSink.assemble(
                options=self.options,
                schema=schema,
                overwrite=overwrite,
                speculation=self.speculation,
            )
        )
