"""A new version of a job, planned but not run: what ``savepoint check`` compares with a
savepoint.

**The job, as a user has it** (:func:`load_job`). ``job`` is one of

* ``path/to/job.py:build`` or ``package.module:build``: a function that takes the
  SparkSession and returns the query's ``DataStreamWriter`` (``df.writeStream...``,
  everything but ``start()``);
* ``path/to/job.py`` or ``package.module``: the script the user runs, run here as
  ``__main__`` with ``args`` as its command line. Its ``start()`` (or ``toTable()``)
  does not start anything: the first call is taken as the query and the script is
  stopped there (by a ``BaseException``, which no ``except Exception`` in the script or
  in :func:`spark_chkpt.restart.run_supervised` catches).

More: docs/concepts/savepoints.md (spark_chkpt/savepoint/plan.py).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import runpy
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_chkpt.errors import ChkptError, PlannedStartError
from spark_chkpt.state.schema import StoreSchema, store_schemas

OUTPUT_MODES = ("append", "complete", "update")


@dataclass(frozen=True)
class SourcePlan:
    """One streaming source of the plan, in the order Spark numbers them in
    ``offsets/N``."""

    format: str
    options: dict[str, str]

    @property
    def topics(self) -> list[str] | None:
        """The topics of ``subscribe`` (Kafka sources), else None."""
        text = self.options.get("subscribe")
        return sorted(t.strip() for t in text.split(",") if t.strip()) if text else None

    def describe(self) -> str:
        if self.topics is not None:
            return f"{self.format} topics {', '.join(self.topics)}"
        for key in ("subscribePattern", "assign", "path"):
            if key in self.options:
                return f"{self.format} {key} {self.options[key]}"
        return self.format


@dataclass(frozen=True)
class JobPlan:
    """The new job: its sources, sink, output mode and stateful operators."""

    job: str
    output_mode: str
    sink_format: str | None
    sink_options: dict[str, str]
    query_name: str | None
    sources: list[SourcePlan]
    operators: dict[int, list[StoreSchema]]
    operator_names: dict[int, str | None]
    mode_error: str | None = None  # Spark refuses the output mode for this plan
    notes: list[str] = field(default_factory=list)

    @property
    def sink_target(self) -> str | None:
        """The sink's table (``path``) or topic (``topic``)."""
        return self.sink_options.get("path") or self.sink_options.get("topic")

    @property
    def checkpoint_location(self) -> str | None:
        return self.sink_options.get("checkpointLocation")


_SETTINGS = "_chkpt_settings"


def _settings(writer: Any) -> dict[str, Any]:
    found = writer.__dict__.get(_SETTINGS)
    if found is None:
        found = {"options": {}}
        writer.__dict__[_SETTINGS] = found
    return found


@contextlib.contextmanager
def _recording() -> Iterator[None]:
    """``DataStreamWriter``'s setters record what they set; ``start`` / ``toTable``
    record their arguments and raise :class:`PlannedStartError` instead of starting."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter as W

    originals = {n: getattr(W, n) for n in ("format", "option", "options", "outputMode")}
    originals.update({n: getattr(W, n) for n in ("queryName", "foreachBatch", "start", "toTable")})

    def wrap(name: str, record: Callable[..., None]) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            record(_settings(self), *args, **kwargs)
            return originals[name](self, *args, **kwargs)

        return method

    def started(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = _settings(self)
        if args:
            found["options"]["path"] = str(args[0])
        for key, value in kwargs.items():
            if value is None:
                continue
            if key in ("format", "outputMode", "queryName"):
                found[key] = str(value)
            elif key != "partitionBy":
                found["options"][key] = str(value)
        raise PlannedStartError(self)

    def to_table(self: Any, table_name: str, *args: Any, **kwargs: Any) -> Any:
        _settings(self)["table"] = table_name
        return started(self, **kwargs)

    patches: dict[str, Any] = {
        "format": wrap("format", lambda s, source: s.__setitem__("format", source)),
        "option": wrap("option", lambda s, k, v: s["options"].__setitem__(k, str(v))),
        "options": wrap("options", lambda s, **o: s["options"].update(_strings(o))),
        "outputMode": wrap("outputMode", lambda s, m: s.__setitem__("outputMode", m)),
        "queryName": wrap("queryName", lambda s, n: s.__setitem__("queryName", n)),
        "foreachBatch": wrap("foreachBatch", lambda s, f: s.__setitem__("format", "foreachBatch")),
        "start": started,
        "toTable": to_table,
    }
    for name, method in patches.items():
        setattr(W, name, method)
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(W, name, method)


def _strings(options: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in options.items() if v is not None}


def load_job(
    *, job: str, args: Sequence[str] = (), session: Callable[[], Any] | None = None
) -> JobPlan:
    """Plan the job ``job`` names (see the module docstring) without running it.
    ``session`` makes the SparkSession handed to a ``module:function`` job (default:
    the active one); a script makes its own (``getOrCreate``)."""
    target, _, function = job.partition(":")
    if function and "/" not in function and not target:
        raise ChkptError(f"job {job!r}: give path/to/job.py[:function] or module[:function]")
    with _recording():
        if function:
            module = _import(target, job)
            build = getattr(module, function, None)
            if not callable(build):
                raise ChkptError(f"job {job}: {target} has no function {function!r}")
            spark = session() if session is not None else _active_session(job)
            try:
                writer = build(spark)
            except PlannedStartError as started:
                writer = started.writer
            except Exception as e:  # the user's code: say whose
                raise ChkptError(f"job {job}: {function}(spark) failed: {e}") from e
            if writer is None or not hasattr(writer, "_df"):
                raise ChkptError(
                    f"job {job}: {function}(spark) returned {type(writer).__name__}, not the "
                    "query's DataStreamWriter (df.writeStream..., without start())"
                )
        else:
            writer = _run_script(target, job, args)
    return plan_writer(writer=writer, job=job)


def _active_session(job: str) -> Any:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise ChkptError(f"job {job}: no SparkSession to hand to it (give session=)")
    return spark


def _import(target: str, job: str) -> Any:
    if target.endswith(".py") or "/" in target:
        path = Path(target)
        if not path.is_file():
            raise ChkptError(f"job {job}: {path.resolve()} is not a file")
        name = f"_chkpt_job_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ChkptError(f"job {job}: {path} cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(target)
    except ImportError as e:
        raise ChkptError(f"job {job}: cannot import {target} ({e})") from e


def _run_script(target: str, job: str, args: Sequence[str]) -> Any:
    saved = sys.argv
    is_file = target.endswith(".py") or "/" in target
    if is_file and not Path(target).is_file():
        raise ChkptError(f"job {job}: {Path(target).resolve()} is not a file")
    sys.argv = [target, *args]
    try:
        if is_file:
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except PlannedStartError as started:
        return started.writer
    except Exception as e:  # the user's script: say whose
        raise ChkptError(f"job {job} failed before it started a query: {e}") from e
    except SystemExit as e:
        raise ChkptError(
            f"job {job} exited (code {e.code}) before it started a query: check its arguments"
        ) from e
    finally:
        sys.argv = saved
    raise ChkptError(f"job {job} ran to its end without starting a streaming query")


def plan_writer(*, writer: Any, job: str) -> JobPlan:
    """The plan of the query ``writer`` (a ``DataStreamWriter``) would start."""
    from spark_chkpt.runtime.connect import is_connect

    if is_connect(writer):
        raise ChkptError(
            f"job {job}: planning a job against a savepoint reads Spark's analyzed plan and "
            "state schemas through the JVM, which a Spark Connect session does not reach: "
            "check it with a classic session (spark-chkpt savepoint check builds one)"
        )
    settings = dict(writer.__dict__.get(_SETTINGS) or {"options": {}})
    mode = str(settings.get("outputMode") or "append").lower()
    if mode not in OUTPUT_MODES:
        raise ChkptError(f"job {job}: output mode {mode!r}, Spark knows {', '.join(OUTPUT_MODES)}")
    df = writer._df
    jdf = df._jdf
    jvm = df.sparkSession._jvm
    session = jdf.sparkSession()
    logical = jdf.queryExecution().analyzed()
    output_mode = getattr(jvm.org.apache.spark.sql.streaming.OutputMode, mode.capitalize())()
    mode_error = None
    try:
        checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
        checker.checkForStreaming(logical, output_mode)
    except Exception as e:  # Py4JJavaError: Spark's AnalysisException
        mode_error = _first_line(e)
    scratch = tempfile.mkdtemp(prefix="spark-chkpt-plan-")
    try:
        _plan_batch_zero(jvm, session, jdf.queryExecution(), logical, output_mode, scratch)
        operators = store_schemas(state_dir=scratch)
        names = _operator_names(scratch, operators)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    options = dict(settings.get("options") or {})
    if "table" in settings:
        options.setdefault("table", str(settings["table"]))
    return JobPlan(
        job=job,
        output_mode=mode,
        sink_format=settings.get("format"),
        sink_options=options,
        query_name=settings.get("queryName"),
        sources=_sources(logical),
        operators=operators,
        operator_names=names,
        mode_error=mode_error,
    )


def _plan_batch_zero(
    jvm: Any, session: Any, qe: Any, logical: Any, output_mode: Any, state_dir: str
) -> None:
    """Spark's micro-batch planning of batch 0 with ``state_dir`` as the state folder:
    the stateful operators get their ids and write their schemas there."""
    runtime = jvm.org.apache.spark.sql.execution.streaming.runtime
    incremental = getattr(runtime, "IncrementalExecution$").__getattr__("MODULE$")
    metadata = getattr(
        jvm.org.apache.spark.sql.execution.streaming.checkpointing, "OffsetSeqMetadata$"
    ).__getattr__("MODULE$")
    propagator = getattr(runtime, "WatermarkPropagator$").__getattr__("MODULE$")
    try:
        execution = runtime.IncrementalExecution(
            session,
            logical,
            output_mode,
            state_dir,
            jvm.java.util.UUID.randomUUID(),
            jvm.java.util.UUID.randomUUID(),
            0,
            jvm.scala.Option.empty(),
            metadata.apply(0, 0, metadata.__getattr__("apply$default$3")()),
            propagator.noop(),
            True,
            incremental.__getattr__("$lessinit$greater$default$12")(),
            incremental.__getattr__("$lessinit$greater$default$13")(),
            qe.mode(),
            False,
        )
        execution.executedPlan()
    except Exception as e:
        raise ChkptError(f"Spark could not plan the job's query: {_first_line(e)}") from e


def _operator_names(state_dir: str, operators: dict[int, list[StoreSchema]]) -> dict[int, Any]:
    from spark_chkpt.fs import resolve
    from spark_chkpt.state.operators import operator_metadata

    root = resolve(state_dir)
    return {
        op: (operator_metadata(root.child(str(op))).get("operatorInfo") or {}).get("operatorName")
        for op in operators
    }


def _sources(logical: Any) -> list[SourcePlan]:
    """The plan's streaming relations, in the order Spark lists them (``collectLeaves``
    of the logical plan: the order of ``offsets/N``'s lines)."""
    found = []
    leaves = logical.collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        kind = leaf.getClass().getSimpleName()
        if "StreamingRelation" not in kind:
            continue
        options: dict[str, str] = {}
        name = kind
        if kind.startswith("StreamingRelationV2"):
            name = str(leaf.sourceName())
            java = leaf.extraOptions().asCaseSensitiveMap()
            options = {str(k): str(java.get(k)) for k in java.keySet().toArray()}
        else:
            source = leaf.dataSource()
            name = str(source.className())
            scala = source.options()
            keys = scala.keys().toSeq()
            options = {
                str(keys.apply(j)): str(scala.apply(keys.apply(j))) for j in range(keys.size())
            }
        found.append(SourcePlan(format=name, options=options))
    return found


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "desc", None) or error)
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("An error occurred", ": ")):
            return line
        if line.startswith(": "):
            return line[2:]
    return text
