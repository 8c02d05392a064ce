"""A failure's first line is the project's one-line message (issue 39): a DataSource
method's error written to stderr before Spark's report of it; Spark's "Python worker
failed to connect back" explained (what, the settings, the restart strategy) in the
supervisor's lines and as the first line of an uncaught error's report."""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import sys
import termios
import threading
import time

import pytest

from spark_chkpt.errors import MissingTopicError
from spark_chkpt.restart import ExitCode, RestartConfig
from spark_chkpt.restart.failure import classify
from spark_chkpt.restart.options import FixedDelay
from spark_chkpt.runtime import report
from spark_chkpt.runtime.report import explain, install_excepthook, report_now, reported
from tests.restart.test_restart import FakeQuery, query_error, supervise

CONNECT_BACK_TEXT = (
    "[STREAM_FAILED] Query [id = 1] terminated with exception: Job aborted due to stage "
    "failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0: "
    "org.apache.spark.SparkException: Python worker failed to connect back.\n"
    "\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker\n"
    "Caused by: java.net.SocketTimeoutException: Timed out while waiting for the Python "
    "worker to connect back\n=== Streaming Query ===\nIdentifier: [id = 1]\n"
)


def test_a_datasource_methods_error_is_one_line_on_stderr_before_it_propagates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    @reported
    def initialOffset() -> dict[str, int]:
        raise MissingTopicError(
            option="subscribe", value="evnts", missing=["evnts"], existing=["events"], servers="h:1"
        )

    with pytest.raises(MissingTopicError):
        initialOffset()
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "spark-chkpt: MissingTopicError: option 'subscribe' = 'evnts': topic 'evnts' does not "
        "exist on h:1; topics there: events. Set failOnMissingTopic=false to wait for it to be "
        "created"
    ]


def test_connect_back_is_explained_with_the_settings_and_the_restart_strategy() -> None:
    said = explain(CONNECT_BACK_TEXT)
    assert said is not None and said.startswith("Python worker failed to connect back: ")
    for needed in (
        "fixed 10 s",
        "spark.python.authenticate.socketTimeout",
        "spark.python.worker.reuse",
        "restart-strategy.type=fixed-delay",
        "run_supervised",
    ):
        assert needed in said
    assert explain("RuntimeError: boom") is None
    assert classify(query_error(CONNECT_BACK_TEXT)).cause == said


def test_the_supervisors_lines_start_with_the_explanation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = RestartConfig(strategy=FixedDelay(attempts=1, delay_ms=0))
    with caplog.at_level(logging.WARNING):
        code, _, _ = supervise(config, FakeQuery(CONNECT_BACK_TEXT), FakeQuery(CONNECT_BACK_TEXT))
    assert code == ExitCode.RESTARTS_EXHAUSTED
    restart, last = caplog.records[-2].getMessage(), caplog.records[-1].getMessage()
    assert "(task failure): Python worker failed to connect back: Spark started" in restart
    assert "Last cause: Python worker failed to connect back: Spark started" in last


def test_an_uncaught_connect_back_error_reports_the_explanation_first(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, error, tb: seen.append(str(error)))
    install_excepthook()
    install_excepthook()  # once only
    error = query_error(CONNECT_BACK_TEXT)
    sys.excepthook(type(error), error, None)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith("spark-chkpt: Python worker failed to connect back: Spark")
    assert seen == [str(error)]  # then Python's own report, unchanged
    plain = RuntimeError("boom")
    sys.excepthook(RuntimeError, plain, None)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (  # pyarrow (the AWS C++ SDK) against a store answering 400 to the checksum header
            "OSError: When creating key 'chk/' in bucket 'b': AWS Error UNKNOWN (HTTP status "
            "400) during PutObject operation: Unable to parse ExceptionName: InvalidArgument "
            "Message: Unsupported header 'x-amz-checksum-crc64nvme' received for this API call.",
            "x-amz-checksum-",
        ),
        (  # boto3 against Backblaze B2
            "An error occurred (InvalidArgument) when calling the PutObject operation: "
            "Unsupported header 'x-amz-sdk-checksum-algorithm' received for this API call.",
            "x-amz-sdk-checksum-algorithm",
        ),
        (  # pyarrow reading an s3a:// checkpoint on s3proxy 2.6.0 (issue 50)
            "OSError: AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush "
            "response stream",
            "AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush"
            " response stream",
        ),
        (
            "An error occurred (XAmzContentSHA256Mismatch) when calling ...",
            "XAmzContentSHA256Mismatch",
        ),
    ],
)
def test_a_store_refusing_the_sdks_checksums_is_explained_with_the_settings(
    text: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    said = explain(text)
    assert said is not None and said.startswith(f"S3 checksums ({named}): "), said
    for setting in (
        "AWS_REQUEST_CHECKSUM_CALCULATION=when_required",
        "AWS_RESPONSE_CHECKSUM_VALIDATION=when_required",
        "spark.hadoop.fs.s3a.checksum.generation=false",
        "spark.hadoop.fs.s3a.checksum.validation=false",
        "storage.aws_checksum_algorithm",
    ):
        assert setting in said
    assert classify(query_error(f"{text}\n=== Streaming Query ===\n")).cause == said

    @reported
    def commit() -> None:  # a driver-side method failing with the store's error
        raise OSError(text)

    with pytest.raises(OSError):
        commit()
    assert capsys.readouterr().err.splitlines() == [f"spark-chkpt: {said}"]


def test_other_s3_errors_are_not_taken_for_the_checksum_wall() -> None:
    assert explain("AWS Error ACCESS_DENIED during GetObject operation: Access Denied") is None
    assert explain("An error occurred (PreconditionFailed) when calling PutObject") is None


class _SlowReader:
    """The JVM's side of a Spark worker's stderr: a pipe read by a thread that starts
    late, as Spark's copying thread does on a loaded machine."""

    def __init__(self, *, late_s: float) -> None:
        self.read_end, write_end = os.pipe()
        self.stream = os.fdopen(write_end, "w", buffering=1)
        self.taken = b""
        self._late_s = late_s
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        time.sleep(self._late_s)
        self.taken += os.read(self.read_end, 65536)

    def unread(self) -> int:
        return int(struct.unpack("i", fcntl.ioctl(self.read_end, termios.FIONREAD, b"\0" * 4))[0])

    def close(self) -> None:
        self._thread.join(timeout=5)
        self.stream.close()
        os.close(self.read_end)


def _missing_topic() -> MissingTopicError:
    return MissingTopicError(
        option="subscribe", value="evnts", missing=["evnts"], existing=["events"], servers="h:1"
    )


@pytest.mark.parametrize("where", ["driver-method", "executor-report-now"])
def test_the_line_has_left_the_workers_stderr_pipe_before_the_error_propagates(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The CI run of stop 57 saw Spark's ERROR dump before the ``spark-chkpt:`` line: a
    worker's stderr is a pipe that a JVM thread copies, and under load that thread read
    the line after the JVM had logged the error. Before: the error propagated with the
    line still in the pipe."""
    reader = _SlowReader(late_s=0.4)
    monkeypatch.setattr(sys, "stderr", reader.stream)
    try:

        @reported
        def initialOffset() -> dict[str, int]:
            if where == "executor-report-now":
                raise report_now(_missing_topic())
            raise _missing_topic()

        with pytest.raises(MissingTopicError):
            initialOffset()
        left = reader.unread()
    finally:
        monkeypatch.undo()
        reader.close()
    assert left == 0, f"{left} bytes of the line were still unread when the error propagated"
    assert reader.taken.decode().splitlines() == [
        "spark-chkpt: MissingTopicError: option 'subscribe' = 'evnts': topic 'evnts' does not "
        "exist on h:1; topics there: events. Set failOnMissingTopic=false to wait for it to be "
        "created"
    ]


def test_a_stderr_pipe_nobody_reads_delays_the_error_by_at_most_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = _SlowReader(late_s=3.0)
    monkeypatch.setattr(report, "DRAIN_WAIT_S", 0.3)
    monkeypatch.setattr(sys, "stderr", reader.stream)
    try:
        began = time.monotonic()
        with pytest.raises(MissingTopicError):
            reported(lambda: (_ for _ in ()).throw(_missing_topic()))()
        took = time.monotonic() - began
        left = reader.unread()
    finally:
        monkeypatch.undo()
        reader.close()
    assert 0.3 <= took < 2.0, took
    assert left > 0
