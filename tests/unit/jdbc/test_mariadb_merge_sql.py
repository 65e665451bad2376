"""MariaDB's upsert/CDC merge: which staging table it reads, when rows are replaced at load."""

from __future__ import annotations

import pytest

from twophase.connectors.jdbc._mariadb._sql import create_staging, dedupes_at_load, merge
from twophase.connectors.jdbc._options import QualifiedName

pytestmark = pytest.mark.unit

TYPES = [("id", "bigint(20)"), ("name", "varchar(40)"), ("body", "text"), ("doc", "longtext")]


@pytest.mark.parametrize(
    ("keys", "order", "expected"),
    [
        (["id"], None, True),
        (["id", "name"], None, True),
        (["id"], "version", False),  # the order column, not arrival, picks the latest row
        (["body"], None, False),  # an index cannot hold a text column whole
        (["id", "doc"], None, False),
        ([], None, False),
    ],
)
def test_the_staging_table_dedupes_only_when_arrival_order_decides_and_keys_index_whole(
    keys: list[str], order: str | None, expected: bool
) -> None:
    assert dedupes_at_load(keys, TYPES, order) is expected


def test_a_deduplicating_staging_table_has_a_unique_key_and_the_merge_reads_it_directly() -> None:
    created = create_staging(TYPES[:2], with_op=True, unique=["id"])[-1]
    assert created.endswith(", UNIQUE KEY (`id`)) ENGINE=InnoDB")
    statements = merge(
        QualifiedName("db", "t"), ["id", "name"], ["id"], None, cdc=True, deduped=True
    )
    assert len(statements) == 3
    delete, insert, drop = statements
    assert delete.startswith("DELETE t FROM `twophase_stage` AS d STRAIGHT_JOIN `db`.`t`")
    assert "FROM `twophase_stage` WHERE `__twophase_op` <> 'd'" in insert
    assert "twophase_latest" not in delete + insert
    assert drop == "DROP TEMPORARY TABLE IF EXISTS `twophase_stage`, `twophase_latest`"


def test_without_dedupe_the_latest_rows_are_ranked_first() -> None:
    assert "UNIQUE" not in create_staging(TYPES[:2], with_op=False)[-1]
    statements = merge(QualifiedName("db", "t"), ["id", "name"], ["id"], "v", cdc=False)
    assert statements[0].startswith("CREATE TEMPORARY TABLE `twophase_latest`")
    assert "ROW_NUMBER() OVER (PARTITION BY `id` ORDER BY `v` IS NULL, `v` DESC" in statements[0]
    assert "FROM `twophase_latest` ON DUPLICATE KEY UPDATE `name` = VALUES(`name`)" in statements[1]
