"""The suite's Spark JVM options (spark_chkpt.testing.jvm): which a run gets, and that a
caller's own ``SPARK_SUBMIT_OPTS`` come last (the JVM takes the last of a repeated flag).
Recording the archive is exercised by every run of the suite (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from spark_chkpt.testing import jvm


def test_default_leaves_the_jvm_as_java_starts_it(tmp_path: Path) -> None:
    assert jvm.submit_opts(tmp_path, environ={"SPARK_CHKPT_TEST_JVM": "default"}) is None


def test_no_archive_gives_the_fast_start_options_then_the_callers_own(tmp_path: Path) -> None:
    options = jvm.submit_opts(
        tmp_path,
        environ={"SPARK_CHKPT_TEST_JVM": "no-archive", "SPARK_SUBMIT_OPTS": "-XX:+UseG1GC"},
    )
    assert options == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+UseG1GC"
    assert not list(tmp_path.iterdir())  # nothing recorded


def test_an_archive_recorded_once_is_named_with_the_options_that_silence_it(
    tmp_path: Path,
) -> None:
    archive = jvm.archive_path(tmp_path)
    archive.write_bytes(b"")  # as recorded by an earlier run: not recorded again
    options = jvm.submit_opts(tmp_path, environ={})
    assert options is not None
    assert options.split() == [
        *jvm.FAST_START,
        *jvm.QUIET_ARCHIVE,
        f"-XX:SharedArchiveFile={archive}",
    ]
