"""The chaos harness draws the same plans as before new sinks and faults came (docs/chaos.md).

Trial ``i`` of seed ``S`` is reproduced by ``random.Random(f"{S}:{i}")`` and the ``--sinks`` list:
a sink or fault added later must leave every plan drawn without it unchanged, so that a failed
trial of an old run can be run again. The 3,200 plans below (trials 0-199 of four seeds, with four
``--sinks`` lists of the sinks that existed before the high-availability ones), with and without
network partitions, are pinned by a digest of what each plan draws.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from tests.chaos import poison as poison_module
from tests.chaos.harness import (
    BAD_ROWS_CHANCE,
    BAD_ROWS_PER_BATCH,
    draw_bad_rows,
    draw_plan,
    expected_output,
)
from tests.chaos.poison import (
    BAD_ROW_CLASSES,
    BAD_ROWS_CHECK_PREFIX,
    BAD_ROWS_TOPIC_BYTES,
    BAD_ROWS_VARCHAR,
    FIXED_KEYS,
    FIXED_ROWS,
    JDBC_KINDS,
    POISON_SQL,
    jdbc_table,
    poison,
)

pytestmark = pytest.mark.unit

SEEDS = (21, 42, 1123, 2512)
SINK_LISTS = (
    ("kafka", "pg-coordinated", "pg-markers"),
    ("pg-coordinated", "pg-markers"),
    ("maria-coordinated", "maria-markers"),
    ("kafka", "pg-coordinated", "pg-markers", "maria-coordinated", "maria-markers"),
)
#: sha256 of the plans, computed at commit 4de8bfb (before the high-availability sinks).
DIGESTS = {
    False: "56014425f98e97f913432b2b607f2f3427eb7bad673cb3e0bfc9afd10decc68b",
    True: "9ebe0c60c4aa98f58a82e7ab7457787a12521c2773e6114937f9c66024fdcc50",
}


def _drawn(plan: Any) -> list[Any]:
    """What a plan draws (not the fields a run fills in, nor fields added since)."""
    faults = [[f.kind, f.point, f.sync, f.delay, f.params] for f in plan.faults]
    return [
        plan.sink,
        plan.pipeline,
        plan.partitions,
        plan.staging,
        plan.source,
        plan.batches,
        plan.rows,
        plan.topic_partitions,
        faults,
    ]


def digest(network_partitions: bool) -> str:
    """The sha256 of the 3,200 plans' draws, in order."""
    sha = hashlib.sha256()
    for seed in SEEDS:
        for sinks in SINK_LISTS:
            for index in range(200):
                plan = draw_plan(seed, index, sinks, network_partitions=network_partitions)
                sha.update(json.dumps(_drawn(plan), sort_keys=True).encode())
    return sha.hexdigest()


@pytest.mark.parametrize("network_partitions", [False, True], ids=["no-partitions", "partitions"])
def test_old_seeds_draw_the_plans_they_drew_before(network_partitions: bool) -> None:
    assert digest(network_partitions) == DIGESTS[network_partitions]


HA_SINKS = ("pg-coordinated-ha", "pg-markers-ha", "maria-coordinated-ha", "maria-markers-ha")


@pytest.mark.parametrize("sinks", [(*HA_SINKS, "kafka-ha"), HA_SINKS, ("kafka-ha",)])
def test_a_replicated_sink_draws_one_fault_of_its_target_and_no_partition(
    sinks: tuple[str, ...],
) -> None:
    usual_counts: set[int] = set()
    for index in range(200):
        plan = draw_plan(7, index, sinks, network_partitions=True)
        kinds = [f.kind for f in plan.faults]
        own = "broker_restart" if plan.sink == "kafka-ha" else "failover"
        assert kinds.count(own) == 1, plan
        assert kinds[-1] == own, plan  # drawn after the others
        usual_counts.add(len(kinds) - 1)
        assert not {"partition_short", "partition_long"} & set(kinds), plan
        assert not any(k.startswith(("pg_restart", "maria_restart", "kafka_")) for k in kinds)
        fault = plan.faults[-1]
        assert fault.point.get("name") != "staged" or plan.staging, plan  # always reached
        if own == "broker_restart" and fault.params["target"] == "coordinator":
            assert fault.point["name"] in ("write", "commit_with_marker"), plan
    # 0-2 of the usual faults beside it, and each of those counts is drawn
    assert usual_counts == {0, 1, 2}, usual_counts


def test_the_sinks_that_existed_before_never_draw_the_replicated_faults() -> None:
    for seed in SEEDS:
        for index in range(200):
            plan = draw_plan(seed, index, SINK_LISTS[-1], network_partitions=True)
            assert not {"failover", "broker_restart"} & {f.kind for f in plan.faults}


ALL_SINKS = (*SINK_LISTS[-1], *HA_SINKS, "kafka-ha")


def test_bad_rows_leave_every_other_draw_as_it_was() -> None:
    for seed in SEEDS[:2]:
        for index in range(100):
            plain = draw_plan(seed, index, ALL_SINKS, network_partitions=True)
            bad = draw_plan(seed, index, ALL_SINKS, network_partitions=True, bad_rows=1.0)
            assert plain.bad_rows == {}
            assert _drawn(bad) == _drawn(plain)
            assert bad.bad_rows, bad  # always: every trial has some


def test_one_trial_in_three_draws_bad_rows_and_always_keeps_those_it_drew() -> None:
    drawn = [draw_plan(42, index, SINK_LISTS[-1], bad_rows=BAD_ROWS_CHANCE) for index in range(300)]
    with_bad = [p for p in drawn if p.bad_rows]
    assert 70 <= len(with_bad) <= 130, len(with_bad)
    for plan in with_bad:
        assert draw_plan(42, plan.index, SINK_LISTS[-1], bad_rows=1.0).bad_rows == plan.bad_rows


@pytest.mark.parametrize("sinks", [SINK_LISTS[0], SINK_LISTS[2], (*HA_SINKS, "kafka-ha")])
def test_poison_keys_are_output_keys_a_few_per_batch_of_the_kinds_the_target_refuses(
    sinks: tuple[str, ...],
) -> None:
    kinds_seen: set[str] = set()
    for index in range(60):
        plan = draw_plan(9, index, sinks, bad_rows=1.0)
        expected = expected_output(plan)
        everything = expected_output(replace(plan, bad_rows={}))
        assert set(plan.bad_rows) <= set(everything), plan  # keys the pipeline writes
        assert set(expected) == set(everything) - set(plan.bad_rows)  # good keys only
        per_batch = Counter(
            (4 * k if plan.pipeline == "aggregate" else k) // 1000 for k in plan.bad_rows
        )
        assert set(per_batch) == set(range(plan.batches)), plan  # every batch has some
        assert max(per_batch.values()) <= BAD_ROWS_PER_BATCH
        kafka = plan.sink in ("kafka", "kafka-ha")
        allowed = {"too_large"} if kafka else set(JDBC_KINDS)
        assert set(plan.bad_rows.values()) <= allowed, plan
        kinds_seen |= set(plan.bad_rows.values())
        assert plan.bad_rows == draw_bad_rows(9, index, plan, 1.0)  # deterministic
        assert not set(plan.bad_rows) & FIXED_KEYS  # the table's own rows are no output's
    kafka_sinks = {"kafka", "kafka-ha"}
    assert kinds_seen == ({"too_large"} if kafka_sinks & set(sinks) else set()) | (
        set(JDBC_KINDS) if set(sinks) - kafka_sinks else set()
    )
    # every class of the connectors' row tables but "other" (an exclusion constraint, PostgreSQL)
    assert {BAD_ROW_CLASSES[k] for k in JDBC_KINDS} == {
        "not_null",
        "too_long",
        "check",
        "invalid_value",
        "foreign_key",
        "unique",
    }


def test_poison_values_are_refused_by_the_targets_and_good_values_are_not() -> None:
    # The JDBC column is varchar(BAD_ROWS_VARCHAR) NOT NULL with a CHECK on a prefix; a Kafka
    # topic's limit BAD_ROWS_TOPIC_BYTES: the longest good value fits, every padded one does not.
    longest_good = 0
    for index in range(60):
        plan = draw_plan(9, index, SINK_LISTS[-1], bad_rows=1.0)
        good = expected_output(plan).values()
        longest_good = max(longest_good, *map(len, good))
        assert not any(v.startswith(BAD_ROWS_CHECK_PREFIX) for v in good)  # the CHECK takes them
    # A value behind the CHECK's prefix still fits: the CHECK refuses it, not the varchar.
    assert 0 < longest_good + len(BAD_ROWS_CHECK_PREFIX) < BAD_ROWS_VARCHAR
    assert POISON_SQL["check"] == ("v", f"concat('{BAD_ROWS_CHECK_PREFIX}', v)")
    assert POISON_SQL["null"] == ("v", "CAST(NULL AS STRING)")
    assert f"repeat('x', {BAD_ROWS_VARCHAR + 8})" in POISON_SQL["too_long"][1]
    column, value = POISON_SQL["too_large"]
    assert column == "v"
    assert int(value.split("repeat('x', ")[1].split(")")[0]) > BAD_ROWS_TOPIC_BYTES
    assert min(expected_output(plan)) >= 0  # no output key is one of the table's own rows
    assert max(FIXED_KEYS) < 0


def test_the_poison_values_of_the_new_columns_are_refused_and_null_is_not() -> None:
    # n integer: out of range on both servers (22003 / 1264); ref: a key the parent lacks; u:
    # the value of the table's committed row, above the one below it (InnoDB's gap lock).
    assert poison_module.OUT_OF_RANGE > 2**31 - 1
    assert POISON_SQL["invalid_value"] == ("n", f"CAST({2**40} AS BIGINT)")
    assert POISON_SQL["foreign_key"] == (
        "ref",
        f"CAST({poison_module.MISSING_PARENT_KEY} AS BIGINT)",
    )
    assert poison_module.MISSING_PARENT_KEY != poison_module.PARENT_KEY
    assert POISON_SQL["unique"] == ("u", f"CAST({poison_module.TAKEN_U} AS BIGINT)")
    below, taken = sorted(u for _k, _v, u in FIXED_ROWS)
    assert (below, taken) == (poison_module.BELOW_U, poison_module.TAKEN_U)
    assert below < taken  # NULLs sort first: good rows go below both


@pytest.mark.parametrize("maria", [False, True], ids=["postgres", "mariadb"])
def test_the_jdbc_table_with_bad_rows_has_a_constraint_for_each_kind(maria: bool) -> None:
    q = "`" if maria else '"'
    parent, create, rows = jdbc_table("t", "t_parent", maria=maria)[1:]
    statements = jdbc_table("t", "t_parent", maria=maria)
    assert statements[0] == f"CREATE TABLE {q}t_parent{q} (id bigint PRIMARY KEY)" + (
        " ENGINE=InnoDB" if maria else ""
    )
    assert parent == f"INSERT INTO {q}t_parent{q} (id) VALUES ({poison_module.PARENT_KEY})"
    assert f"v varchar({BAD_ROWS_VARCHAR}) NOT NULL CHECK (v NOT LIKE 'check-%')" in create
    assert "n integer" in create
    assert f"FOREIGN KEY (ref) REFERENCES {q}t_parent{q} (id)" in create
    assert "u bigint UNIQUE" in create
    assert rows == (
        f"INSERT INTO {q}t{q} (k, v, u) VALUES (-2, 'below-the-taken-u', 0), "
        "(-1, 'holds-the-taken-u', 1)"
    )


class _Frame:
    """A DataFrame's ``selectExpr``, recorded."""

    def __init__(self) -> None:
        self.exprs: tuple[str, ...] = ()

    def selectExpr(self, *exprs: str) -> _Frame:  # noqa: N802
        self.exprs = exprs
        return self


@pytest.mark.parametrize("kind", [*JDBC_KINDS, "too_large"])
def test_a_poison_key_changes_its_kinds_column_only(kind: str) -> None:
    jdbc = kind != "too_large"
    other = "check" if kind == "too_long" else "too_long"  # another key, of a kind of v
    exprs = poison(_Frame(), {"7": kind, "9": kind, "12": other}, jdbc=jdbc).exprs
    columns = ["v", "ref", "n", "u"] if jdbc else ["v"]
    assert exprs[0] == "k"
    assert [e.rsplit(" AS ", 1)[1] for e in exprs[1:]] == columns
    column, value = POISON_SQL[kind]
    for expr, name in zip(exprs[1:], columns, strict=True):
        otherwise = "v" if name == "v" else "CAST(NULL AS BIGINT)"
        assert expr.endswith(
            f"{otherwise} END AS {name}" if "WHEN" in expr else f"{otherwise} AS {name}"
        )
        if name == column:
            assert f"WHEN k IN (7, 9) THEN {value}" in expr
        else:
            assert "(7, 9)" not in expr
    assert f"WHEN k IN (12) THEN {POISON_SQL[other][1]}" in exprs[1]
    assert all("(12)" not in expr for expr in exprs[2:])
