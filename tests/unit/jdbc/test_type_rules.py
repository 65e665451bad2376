"""The family's type rules read a dialect's description: a toy database declares only its table."""

from __future__ import annotations

import pyarrow as pa
import pytest

from twophase.connectors.jdbc._table import TableColumn
from twophase.connectors.jdbc._type_rules import TypeRow, TypeRules

pytestmark = pytest.mark.unit

TOY = TypeRules(
    "Toy",
    (
        TypeRow("int32 int64", "INTEGER", frozenset({"integer"}), "number"),
        TypeRow("string", "TEXT", frozenset({"text"}), "text", key_created="VARCHAR(64)"),
        TypeRow("timestamp_tz", "TIMESTAMPTZ", frozenset({"timestamptz"}), "utc"),
        TypeRow("timestamp_ntz", None, frozenset({"timestamp"}), "text"),
        TypeRow("null", "TEXT", None, "null"),
    ),
    other_kind="text",
    hint=lambda _t, column: f" (hint for {column.base_type})",
)


def col(base: str, *, generated: bool = False) -> TableColumn:
    return TableColumn("c", base.upper(), base, "", None, False, False, generated)


def test_a_row_names_its_arrow_types_and_what_they_become() -> None:
    assert TOY.sql_type(pa.int64()) == "INTEGER"
    assert TOY.sql_type(pa.dictionary(pa.int8(), pa.large_string())) == "TEXT"
    assert TOY.sql_type(pa.string(), key=True) == "VARCHAR(64)"
    assert TOY.sql_type(pa.timestamp("us", tz="UTC")) == "TIMESTAMPTZ"
    assert TOY.column_kind(pa.timestamp("us", tz="UTC"), None) == "utc"
    assert TOY.column_kind(pa.float64(), None) == "text"  # no row: the dialect's other kind


def test_a_type_without_a_counterpart_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="no Toy type for Arrow type timestamp"):
        TOY.sql_type(pa.timestamp("us"))
    with pytest.raises(TypeError, match="no Toy type for Arrow type double"):
        TOY.sql_type(pa.float64())


def test_the_check_against_a_column_is_written_once() -> None:
    assert TOY.compatibility_problem(pa.int32(), col("integer")) is None
    assert TOY.compatibility_problem(pa.null(), col("integer")) is None  # null: any column
    assert TOY.compatibility_problem(pa.float64(), col("integer")) == (
        "Arrow type double is not supported by the Toy sink"
    )
    assert TOY.compatibility_problem(pa.string(), col("integer")) == (
        "column 'c' is INTEGER but the input column is string (written as TEXT) (hint for integer)"
    )
    assert TOY.compatibility_problem(pa.timestamp("us"), col("text")) == (
        "column 'c' is TEXT but the input column is timestamp[us] (written as nothing)"
        " (hint for text)"
    )
    assert TOY.compatibility_problem(pa.int32(), col("integer", generated=True)) == (
        "column 'c' is generated and cannot be written; drop it from the input"
    )


def test_a_misspelt_arrow_family_is_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="no Arrow family 'int33'"):
        TypeRow("int33", "INTEGER", frozenset({"integer"}), "number")
