"""The key and value schemas Spark's state stores were written with, from the files
Spark keeps beside the state.

Spark writes, per stateful operator, ``state/<op>/_metadata/metadata`` (the operator's
name and stores, see :mod:`spark_chkpt.state.operators`) and, per store, one schema
file for partition 0:

* ``state/<op>/0/_metadata/schema`` (the ``default`` store), or
  ``state/<op>/0/<store>/_metadata/schema`` (a stream-stream join's stores): Java
  ``DataOutputStream`` text, ``v1`` (the key and the value schema JSON, one
  ``writeUTF`` each) or ``v2`` (``v2``, then for the key and for the value a chunk count
  and that many ``writeUTF`` chunks of the JSON: a schema may exceed 64 KB);
* ``state/<op>/_stateSchema/<store>/<batch>_<uuid>`` (schema format 3, written by
  ``transformWithState``): ``v3`` and one JSON line per column family.

:func:`store_schemas` reads them for every operator under a ``state/`` folder (a
checkpoint's, a savepoint's copy, or the folder a plan-only run of a new job wrote).
Pure filesystem through :mod:`spark_chkpt.fs`, no Spark.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from spark_chkpt.errors import FormatError
from spark_chkpt.fs import Location, resolve
from spark_chkpt.state.operators import DEFAULT_STORE, operator_metadata


@dataclass(frozen=True)
class Field:
    """One column of a state schema: its name and Spark's type (``simpleString``)."""

    name: str
    type: str
    nullable: bool = True


@dataclass(frozen=True)
class StoreSchema:
    """The schemas of one state store (or column family) of one operator."""

    operator_id: int
    operator_name: str | None
    store_name: str
    key: tuple[Field, ...]
    value: tuple[Field, ...]


def store_schemas(*, state_dir: str) -> dict[int, list[StoreSchema]]:
    """Per operator id under ``state_dir`` (a checkpoint's ``state/``), the schemas of
    its stores; an operator whose schema files are missing (a query started before
    Spark 3.1) maps to an empty list."""
    root = resolve(state_dir)
    found: dict[int, list[StoreSchema]] = {}
    if not root.exists():
        return found
    for info in root.list():
        if not info.base_name.isdigit() or info.type.name != "Directory":
            continue
        op = int(info.base_name)
        op_dir = root.child(info.base_name)
        meta = operator_metadata(op_dir)
        name = (meta.get("operatorInfo") or {}).get("operatorName")
        stores = [
            str(s.get("storeName", DEFAULT_STORE))
            for s in meta.get("stateStoreInfo") or ()
            if isinstance(s, dict)
        ] or [DEFAULT_STORE]
        schemas: list[StoreSchema] = []
        for store in stores:
            part = op_dir.child("0") if store == DEFAULT_STORE else op_dir.child("0", store)
            path = part.child("_metadata", "schema")
            if path.exists():
                key, value = _read_v1_v2(path)
                schemas.append(StoreSchema(op, name, store, key, value))
        schemas += _read_v3(op_dir, op, name)
        found[op] = schemas
    return dict(sorted(found.items()))


def _fields(doc: Any) -> tuple[Field, ...]:
    if isinstance(doc, str):
        doc = json.loads(doc)
    return tuple(
        Field(name=str(f["name"]), type=_type_name(f["type"]), nullable=bool(f.get("nullable")))
        for f in (doc or {}).get("fields") or ()
    )


def _type_name(t: Any) -> str:
    """Spark's JSON type as its ``simpleString`` (``int``, ``struct<a:string>``...)."""
    if isinstance(t, str):
        return {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}.get(
            t, t
        )
    kind = t.get("type")
    if kind == "struct":
        inner = ",".join(f"{f['name']}:{_type_name(f['type'])}" for f in t.get("fields") or ())
        return f"struct<{inner}>"
    if kind == "array":
        return f"array<{_type_name(t['elementType'])}>"
    if kind == "map":
        return f"map<{_type_name(t['keyType'])},{_type_name(t['valueType'])}>"
    return json.dumps(t, sort_keys=True)


def _read_v1_v2(path: Location) -> tuple[tuple[Field, ...], tuple[Field, ...]]:
    data = path.read_bytes()
    at = 0

    def utf() -> str:
        nonlocal at
        (size,) = struct.unpack_from(">H", data, at)
        text = data[at + 2 : at + 2 + size].decode("utf-8")
        at += 2 + size
        return text

    def chunks() -> str:
        nonlocal at
        (count,) = struct.unpack_from(">i", data, at)
        at += 4
        return "".join(utf() for _ in range(count))

    try:
        version = utf()
        if version == "v1":
            return _fields(utf()), _fields(utf())
        if version == "v2":
            return _fields(chunks()), _fields(chunks())
    except (struct.error, UnicodeDecodeError, ValueError, KeyError) as e:
        raise FormatError(f"{path}: unreadable state schema file ({e})") from e
    raise FormatError(f"{path}: state schema format {version!r}, this release reads v1 and v2")


def _read_v3(op_dir: Location, op: int, name: str | None) -> list[StoreSchema]:
    """The newest ``_stateSchema/<store>/`` file of each store (format 3)."""
    root = op_dir.child("_stateSchema")
    if not root.exists():
        return []
    result = []
    for store in sorted(i.base_name for i in root.list() if i.type.name == "Directory"):
        files = [
            i
            for i in root.child(store).list()
            if i.type.name == "File" and not i.base_name.startswith(".")
        ]
        if not files:
            continue
        newest = max(files, key=lambda i: (int(i.base_name.split("_", 1)[0] or 0), i.mtime_ns))
        path = root.child(store, newest.base_name)
        lines = path.read_text().splitlines()
        if not lines or lines[0].strip() != "v3":
            raise FormatError(f"{path}: state schema format {lines[:1]!r}, expected v3")
        for line in lines[1:]:
            if not line.strip():
                continue
            doc = json.loads(line)
            family = str(doc.get("columnFamilyName") or store)
            key, value = _fields(doc.get("keySchema")), _fields(doc.get("valueSchema"))
            result.append(StoreSchema(op, name, family, key, value))
    return result
