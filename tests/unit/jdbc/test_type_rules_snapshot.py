"""Both dialects' type rules over a broad list of Arrow types, held to a recorded snapshot.

``type_rules_snapshot.json`` was recorded from the rules as they were before they became a
description (``connectors/jdbc/_type_rules.py``): for each Arrow type below, a digest of the
created type (as a key column too), every compatibility answer and message against each column
below, and every rendering kind. A change of any of them is a change of behaviour, and fails here
showing the answers now. To record again after a deliberate change:
``python tests/unit/jdbc/test_type_rules_snapshot.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from twophase.connectors.jdbc._mariadb._type_map import MARIADB_TYPES
from twophase.connectors.jdbc._postgres._type_map import POSTGRES_TYPES
from twophase.connectors.jdbc._table import TableColumn
from twophase.connectors.jdbc._type_rules import TypeRules

pytestmark = pytest.mark.unit

SNAPSHOT = Path(__file__).with_name("type_rules_snapshot.json")

_STRUCT = pa.struct([("a", pa.int32()), ("b", pa.string())])


def _types() -> list[pa.DataType]:
    types = [
        pa.null(),
        pa.bool_(),
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.uint8(),
        pa.uint16(),
        pa.uint32(),
        pa.uint64(),
        pa.float16(),
        pa.float32(),
        pa.float64(),
        pa.decimal128(10, 2),
        pa.decimal128(38, 0),
        pa.decimal256(50, 10),
        pa.decimal256(65, 0),
        pa.decimal256(66, 2),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.large_binary(),
        pa.binary(16),
        pa.date32(),
        pa.date64(),
        pa.timestamp("s"),
        pa.timestamp("ms"),
        pa.timestamp("us"),
        pa.timestamp("ns"),
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("ns", tz="Europe/Paris"),
        pa.time32("s"),
        pa.time32("ms"),
        pa.time64("us"),
        pa.time64("ns"),
        pa.duration("s"),
        pa.duration("ms"),
        pa.duration("us"),
        pa.duration("ns"),
        pa.month_day_nano_interval(),
        pa.dictionary(pa.int32(), pa.string()),
        pa.dictionary(pa.int8(), pa.large_string()),
        pa.dictionary(pa.int32(), pa.binary()),
        pa.dictionary(pa.int16(), pa.int64()),
        pa.list_(pa.int64()),
        pa.list_(pa.int8()),
        pa.list_(pa.bool_()),
        pa.list_(pa.float64()),
        pa.list_(pa.decimal128(12, 3)),
        pa.list_(pa.decimal128(12, 0)),
        pa.list_(pa.string()),
        pa.list_(pa.dictionary(pa.int32(), pa.string())),
        pa.list_(pa.binary()),
        pa.list_(pa.date32()),
        pa.list_(pa.timestamp("us")),
        pa.list_(pa.timestamp("us", tz="UTC")),
        pa.list_(pa.time64("us")),
        pa.list_(pa.duration("us")),
        pa.list_(pa.null()),
        pa.list_(pa.uint64()),
        pa.list_(pa.month_day_nano_interval()),
        pa.large_list(pa.string()),
        pa.list_(pa.int32(), 3),
        pa.list_(pa.list_(pa.int32())),
        pa.list_(pa.large_list(pa.int32())),
        pa.list_(_STRUCT),
        pa.list_(pa.map_(pa.string(), pa.int64())),
        _STRUCT,
        pa.struct([]),
        pa.map_(pa.string(), pa.int64()),
        pa.map_(pa.int32(), pa.list_(pa.string())),
        pa.dense_union([pa.field("a", pa.int32())]),
        pa.sparse_union([pa.field("a", pa.int32()), pa.field("b", pa.string())]),
        pa.run_end_encoded(pa.int32(), pa.string()),
    ]
    for name, args in [
        ("string_view", ()),
        ("binary_view", ()),
        ("list_view", (pa.int64(),)),
        ("large_list_view", (pa.string(),)),
        ("uuid", ()),
        ("decimal32", (9, 2)),
        ("decimal64", (18, 0)),
    ]:
        factory = getattr(pa, name, None)
        if factory is not None:
            types.append(factory(*args))
    return types


def _column(
    base: str, *, category: str = "", element: str | None = None, generated: bool = False
) -> TableColumn:
    return TableColumn(
        f"c_{base}", f"{base} (declared)", base, category, element, False, False, generated
    )


def _postgres_columns() -> list[TableColumn]:
    plain = [
        "bool", "int2", "int4", "int8", "numeric", "float4", "float8", "text", "varchar",
        "bpchar", "name", "citext", "json", "jsonb", "uuid", "xml", "inet", "bytea", "date",
        "timestamp", "timestamptz", "time", "timetz", "interval", "point",
    ]  # fmt: skip
    columns = [_column(base, category="N") for base in plain]
    columns.append(_column("mood", category="E"))
    for element in ["int8", "int4", "numeric", "float8", "bool", "text", "bytea", "date",
                    "timestamp", "timestamptz", "time", "interval", "jsonb"]:  # fmt: skip
        columns.append(_column(f"_{element}", category="A", element=element))
    columns.append(_column("int4", category="N", generated=True))
    return columns


def _mariadb_columns() -> list[TableColumn]:
    bases = [
        "tinyint", "smallint", "mediumint", "int", "bigint", "bit", "decimal", "float",
        "double", "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json",
        "enum", "set", "uuid", "inet4", "inet6", "binary", "varbinary", "tinyblob", "blob",
        "mediumblob", "longblob", "date", "datetime", "timestamp", "time", "year", "geometry",
    ]  # fmt: skip
    columns = [_column(base) for base in bases]
    columns.append(_column("int", generated=True))
    return columns


def _created(rules: TypeRules, arrow_type: pa.DataType, key: bool) -> str:
    try:
        return rules.sql_type(arrow_type, key)
    except TypeError as exc:
        return f"TypeError: {exc}"


def _rules_snapshot(rules: TypeRules, columns: list[TableColumn]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arrow_type in _types():
        entry: dict[str, Any] = {
            "created": _created(rules, arrow_type, False),
            "created as a key": _created(rules, arrow_type, True),
            "kind when created": rules.column_kind(arrow_type, None),
        }
        for column in columns:
            label = f"{column.base_type}/{column.category}/{column.element_type}"
            label += "/generated" if column.generated else ""
            problem = rules.compatibility_problem(arrow_type, column)
            entry[f"into {label}"] = (
                problem if problem is not None else rules.column_kind(arrow_type, column)
            )
        out[str(arrow_type)] = entry
    return out


def snapshot() -> dict[str, Any]:
    """Every answer of both dialects' rules, by dialect, Arrow type and question."""
    return {
        "postgres": _rules_snapshot(POSTGRES_TYPES, _postgres_columns()),
        "mariadb": _rules_snapshot(MARIADB_TYPES, _mariadb_columns()),
    }


def digests(answers: dict[str, Any]) -> dict[str, dict[str, str]]:
    """One digest per dialect and Arrow type of its answers."""
    return {
        dialect: {
            arrow_type: hashlib.sha256(json.dumps(a, sort_keys=True).encode()).hexdigest()[:16]
            for arrow_type, a in by_type.items()
        }
        for dialect, by_type in answers.items()
    }


def test_type_rules_answer_as_recorded() -> None:
    recorded = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    answers = snapshot()
    now = digests(answers)
    for dialect in ("postgres", "mariadb"):
        # a type only a newer pyarrow builds is compared where the recording had it
        common = set(now[dialect]) & set(recorded[dialect])
        assert len(common) >= 75
        for arrow_type in sorted(common):
            assert now[dialect][arrow_type] == recorded[dialect][arrow_type], (
                dialect,
                arrow_type,
                answers[dialect][arrow_type],
            )


if __name__ == "__main__":
    text = json.dumps(digests(snapshot()), indent=1, sort_keys=True)
    SNAPSHOT.write_text(text + "\n", encoding="utf-8")
    sys.exit(0)
