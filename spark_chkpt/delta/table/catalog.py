"""A Delta table named as users name it (``db.events``) resolved to its location.

Runs where a SparkSession is: the driver's Python process. ``chkpt-delta``'s options
reach the sink in a Python worker Spark starts, which has no session to ask, so
:func:`install_table_option` (called by :func:`spark_chkpt.register`) resolves the
``table`` and ``deadLetterTable`` options when the query starts (and
``toTable("db.events")``), handing the sink the location (:data:`LOCATION_OPTIONS`);
``DeltaUpsert(table=...)`` resolves its own with the active session.

Only the session catalog (``spark_catalog``, the metastore delta-spark's ``DeltaCatalog``
serves) is resolved: the sink writes by location through delta-rs, which cannot get the
credentials a catalog such as Unity Catalog vends for its managed tables. The sink never
creates a catalog table (it cannot register one in the metastore): the table must exist.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_chkpt.errors import CatalogTableError, ConfigError

SESSION_CATALOG = "spark_catalog"

# name option -> (path option, the option the driver's resolution sets for the sink)
LOCATION_OPTIONS: dict[str, tuple[str, str]] = {
    "table": ("path", "tableLocation"),
    "deadLetterTable": ("deadLetterPath", "deadLetterTableLocation"),
}


@dataclass(frozen=True)
class CatalogTable:
    """A catalog table's name as given and its location (a URI delta-rs opens)."""

    name: str
    location: str


def name_parts(name: str) -> list[str]:
    """``db.events``, ``spark_catalog.db.events``, backquoted parts
    (```my db`.events``) split into their identifiers."""
    parts: list[str] = []
    current, quoted, i = "", False, 0
    while i < len(name):
        c = name[i]
        if c == "`":
            if quoted and name[i + 1 : i + 2] == "`":
                current += "`"
                i += 1
            else:
                quoted = not quoted
        elif c == "." and not quoted:
            parts.append(current.strip())
            current = ""
        else:
            current += c
        i += 1
    parts.append(current.strip())
    if quoted or not all(parts) or len(parts) > 3:
        raise ConfigError("table", name, "a table name: table, db.table or spark_catalog.db.table")
    return parts


def _refuse(writer: str, name: str, why: str, way: str) -> CatalogTableError:
    return CatalogTableError(f"{writer}: table {name} {why}. {way} Nothing was staged.", table=name)


def check_catalog(name: str, *, current_catalog: str, writer: str) -> list[str]:
    """The parts of ``name`` once it is found to be in the session catalog; else
    :class:`CatalogTableError` (another catalog: Unity Catalog's, or any other)."""
    parts = name_parts(name)
    catalog = parts[0] if len(parts) == 3 else current_catalog
    if catalog.lower() != SESSION_CATALOG:
        raise _refuse(
            writer,
            name,
            f"is in catalog '{catalog}', not the session catalog ({SESSION_CATALOG}): "
            "spark-chkpt writes a Delta table by its location through delta-rs and cannot "
            "use the credentials a catalog such as Unity Catalog vends for the tables it "
            "manages",
            "Way forward: write a table of the session catalog (hive_metastore on "
            "Databricks) or an external table by its location (option path), or write "
            "this table with format('delta').",
        )
    return parts


def resolve_table(spark: Any, name: str, *, writer: str = "chkpt-delta") -> CatalogTable:
    """The location of the Delta table ``name`` of ``spark``'s session catalog, read
    with ``DESCRIBE TABLE EXTENDED``; :class:`CatalogTableError` naming the table and
    why if it does not exist, is a view, is not a Delta table, has no location or is in
    another catalog."""
    check_catalog(name, current_catalog=str(spark.catalog.currentCatalog()), writer=writer)
    if not spark.catalog.tableExists(name):
        raise _refuse(
            writer,
            name,
            "does not exist in the session catalog",
            "The sink writes a catalog table by its location and cannot register a new "
            "table in the metastore, so the first batch does not create it: create it "
            f"first (CREATE TABLE {name} (...) USING delta), or give option path for a "
            "table by location only.",
        )
    found = spark.catalog.getTable(name)
    kind = str(found.tableType or "").upper()
    if found.isTemporary or kind in ("VIEW", "TEMPORARY", "MATERIALIZED_VIEW"):
        raise _refuse(
            writer,
            name,
            "is a view, not a table",
            "Way forward: name the Delta table the view reads, or give its path.",
        )
    details = _described(spark, name)
    provider = details.get("provider", "").lower()
    if provider != "delta":
        raise _refuse(
            writer,
            name,
            f"is a {provider or 'non-Delta'} table, not a Delta table",
            "Way forward: convert it (CONVERT TO DELTA) or write it with its own format.",
        )
    location = details.get("location", "")
    if not location:
        raise _refuse(
            writer,
            name,
            "has no location in the catalog, so it cannot be written by path (a "
            "catalog-managed table whose files only the catalog's vended credentials reach)",
            "Way forward: write it with format('delta').",
        )
    return CatalogTable(name=name, location=location)


def _described(spark: Any, name: str) -> dict[str, str]:
    """``DESCRIBE TABLE EXTENDED``'s detailed rows (``Provider``, ``Location``, ...) by
    lower-cased name."""
    quoted = ".".join(f"`{p.replace('`', '``')}`" for p in name_parts(name))
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {quoted}").collect()
    return {str(r[0]).strip().lower(): str(r[1] or "").strip() for r in rows if r[0]}


def resolve_options(spark: Any, options: Mapping[str, str], *, writer: str) -> dict[str, str]:
    """The options to add for ``options`` naming tables (:data:`LOCATION_OPTIONS`, any
    case): each table's location; :class:`ConfigError` if a path is given with it."""
    given = {k.lower(): (k, v) for k, v in options.items()}
    added: dict[str, str] = {}
    for name_option, (path_option, location_option) in LOCATION_OPTIONS.items():
        if name_option.lower() not in given:
            continue
        _, table = given[name_option.lower()]
        if path_option.lower() in given:
            raise ConfigError(
                name_option,
                table,
                f"give either option {path_option} or option {name_option}, not both",
            )
        added[location_option] = resolve_table(spark, str(table).strip(), writer=writer).location
    return added


SINK_FORMAT = "chkpt-delta"


def install_table_option() -> None:
    """Make classic PySpark's ``DataStreamWriter`` resolve the ``table`` options of a
    ``chkpt-delta`` query when it starts (``start()``, and ``toTable(name)`` as
    ``option("table", name)``). Installed once; other formats pass as before."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    if getattr(DataStreamWriter, "_spark_chkpt_tables", False):
        return

    original_start = DataStreamWriter.start
    original_to_table = DataStreamWriter.toTable

    @functools.wraps(original_start)
    def start(self: Any, path: str | None = None, format: str | None = None, *a: Any, **kw: Any):  # type: ignore[no-untyped-def]
        _resolve_tables(self, path, format, kw)
        return original_start(self, path, format, *a, **kw)

    @functools.wraps(original_to_table)
    def to_table(self: Any, tableName: str, format: str | None = None, *a: Any, **kw: Any):  # type: ignore[no-untyped-def]
        source = (format or _recorded(self)["format"] or "").lower()
        if source != SINK_FORMAT:
            return original_to_table(self, tableName, format, *a, **kw)
        self.option("table", tableName)
        return start(self, None, format, *a, **kw)

    DataStreamWriter.format = _recording(DataStreamWriter.format, _on_format)  # type: ignore[method-assign]
    DataStreamWriter.option = _recording(DataStreamWriter.option, _on_option)  # type: ignore[method-assign]
    DataStreamWriter.options = _recording(DataStreamWriter.options, _on_options)  # type: ignore[method-assign]
    DataStreamWriter.start = start  # type: ignore[method-assign]
    DataStreamWriter.toTable = to_table  # type: ignore[method-assign]
    DataStreamWriter._spark_chkpt_tables = True  # type: ignore[attr-defined]


def _recorded(writer: Any) -> dict[str, Any]:
    """The format and options a ``DataStreamWriter`` was given, kept on it."""
    return writer.__dict__.setdefault("_chkpt_options", {"format": None, "options": {}})


def _recording(method: Callable[..., Any], record: Callable[..., None]) -> Callable[..., Any]:
    """``method`` of ``DataStreamWriter``, its arguments first recorded by ``record``."""

    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        record(_recorded(self), *args, **kwargs)
        return method(self, *args, **kwargs)

    return wrapped


def _on_format(state: dict[str, Any], source: str) -> None:
    state["format"] = source


def _on_option(state: dict[str, Any], key: str, value: Any) -> None:
    state["options"][key] = value


def _on_options(state: dict[str, Any], **options: Any) -> None:
    state["options"].update(options)


def _resolve_tables(writer: Any, path: str | None, format: str | None, options: Any) -> None:
    """At ``start()``: a ``chkpt-delta`` query's ``table`` options set as the locations
    the catalog names (other formats untouched)."""
    state = _recorded(writer)
    source = (format or state["format"] or "").lower()
    if source != SINK_FORMAT:
        return
    given = {**state["options"], **options}
    if path is not None:
        given["path"] = path
    for key, value in resolve_options(writer._spark, given, writer=SINK_FORMAT).items():
        writer.option(key, value)
