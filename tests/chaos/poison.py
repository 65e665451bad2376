"""A chaos trial's poison rows (issue 52): their kinds, how each is made, the table refusing it.

A poison key's row is made by the driver's pipeline from the key alone (:func:`poison`: a
``CASE WHEN k IN (...)`` at the end of the pipeline), so a replay gives the same row however the
batch is laid out. Each kind is refused by the target with one error class (a dead letter's
``error_class``), under either protocol, on PostgreSQL and MariaDB alike, whichever partition its
row lands in:

=================  ===============  ==========================================================
kind               ``error_class``  the row (PostgreSQL / MariaDB code)
=================  ===============  ==========================================================
``null``           not_null         ``v`` NULL into ``v varchar(32) NOT NULL`` (23502 / 1048)
``too_long``       too_long         ``v`` padded by 40 characters (22001 / 1406)
``check``          check            ``v`` behind the prefix the CHECK refuses (23514 / 4025)
``invalid_value``  invalid_value    ``n`` = 2**40 into ``n integer`` (22003 / 1264)
``foreign_key``    foreign_key      ``ref`` = 2, which no row of the parent table has
                                    (23503 / 1452)
``unique``         unique           ``u`` = 1, the ``u`` of a row committed before the query
                                    (23505 / 1062)
``too_large``      too_large        Kafka: the value padded past the topic's
                                    ``max.message.bytes``
=================  ===============  ==========================================================

Good rows leave ``ref``, ``n`` and ``u`` NULL. The ``unique`` poison's twin is the table's own
row ``(k=-1, u=1)``, committed when the harness creates the table (:func:`jdbc_table`): so the
poison row is the one refused on every replay, under both protocols, wherever the poison rows
are. Twins both written by the query would not be: which one a server refuses follows the order
of the writes, and under the coordinated protocol twins in two partitions make the second wait
for the first's prepared transaction until ``lock_timeout`` (``docs/jdbc.md``, "Dead letters").
A second committed row ``(k=-2, u=0)`` sits below the twin in the unique index: InnoDB's check of
a duplicate locks the gap below the duplicate it finds, even under ``READ COMMITTED``, until the
transaction prepares (MariaDB drops such locks at ``XA PREPARE``) or commits. Without that row
the gap would be where every NULL ``u`` of the good rows goes: another partition's good rows
would wait for it, and two partitions refused at once would deadlock (1213, a task retried).
The harness's rows have negative keys, which no input has; the content check leaves them out
(:data:`FIXED_KEYS`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BAD_ROWS_CHECK_PREFIX",
    "BAD_ROWS_TOPIC_BYTES",
    "BAD_ROWS_VARCHAR",
    "BAD_ROW_CLASSES",
    "FIXED_KEYS",
    "JDBC_KINDS",
    "KAFKA_KINDS",
    "POISON_SQL",
    "jdbc_table",
    "poison",
]

#: The width of the JDBC table's ``v`` column in a trial with bad rows (every good value fits).
BAD_ROWS_VARCHAR = 32
#: ``max.message.bytes`` of a Kafka trial's topic with bad rows, and the producer's ``batch.size``
#: (at most the topic's limit, or the sink refuses the topic).
BAD_ROWS_TOPIC_BYTES = 16384
#: The prefix the JDBC table's CHECK refuses in a trial with bad rows (no good value has it).
BAD_ROWS_CHECK_PREFIX = "check-"
#: The parent table's one key (a poison ``ref`` names another), and the value of ``u`` that the
#: table's committed row holds (a poison ``u`` repeats it) -- with the row below it.
PARENT_KEY = 1
MISSING_PARENT_KEY = 2
TAKEN_U = 1
BELOW_U = 0
#: A value out of the ``integer`` column ``n``'s range on both servers.
OUT_OF_RANGE = 2**40

#: The kinds a JDBC sink draws, and Kafka's (order matters: the draw picks by position).
JDBC_KINDS = ("null", "too_long", "check", "invalid_value", "foreign_key", "unique")
KAFKA_KINDS = ("too_large",)
#: The error class each kind of poison must be set aside with (the dead letter's ``error_class``).
BAD_ROW_CLASSES = {
    "null": "not_null",
    "too_long": "too_long",
    "check": "check",
    "invalid_value": "invalid_value",
    "foreign_key": "foreign_key",
    "unique": "unique",
    "too_large": "too_large",
}

#: The JDBC table's columns beside ``k`` and ``v`` in a trial with bad rows: name -> Spark type
#: of the pipeline's column (NULL in every good row).
EXTRA_COLUMNS = {"ref": "BIGINT", "n": "BIGINT", "u": "BIGINT"}
#: What a poison key's row is, by kind: the column it changes and its value there (Spark SQL of
#: the pipeline's ``k`` and ``v``).
POISON_SQL = {
    "null": ("v", "CAST(NULL AS STRING)"),
    "too_long": ("v", f"concat(v, repeat('x', {BAD_ROWS_VARCHAR + 8}))"),
    "check": ("v", f"concat('{BAD_ROWS_CHECK_PREFIX}', v)"),
    "invalid_value": ("n", f"CAST({OUT_OF_RANGE} AS BIGINT)"),
    "foreign_key": ("ref", f"CAST({MISSING_PARENT_KEY} AS BIGINT)"),
    "unique": ("u", f"CAST({TAKEN_U} AS BIGINT)"),
    "too_large": ("v", f"concat(v, repeat('x', {BAD_ROWS_TOPIC_BYTES + 4096}))"),
}
#: The rows the harness commits in the table before the query: ``(k, v, u)``.
FIXED_ROWS = ((-2, "below-the-taken-u", BELOW_U), (-1, "holds-the-taken-u", TAKEN_U))
FIXED_KEYS = frozenset(k for k, _v, _u in FIXED_ROWS)


def jdbc_table(table: str, parent: str, *, maria: bool) -> list[str]:
    """The statements creating a trial's JDBC table with bad rows, its parent and its fixed rows.

    ``table`` and ``parent`` are the names, unquoted; each statement runs on its own.
    """
    q = "`" if maria else '"'
    engine = " ENGINE=InnoDB" if maria else ""
    v = f"v varchar({BAD_ROWS_VARCHAR}) NOT NULL CHECK (v NOT LIKE '{BAD_ROWS_CHECK_PREFIX}%')"
    fixed = ", ".join(f"({k}, '{v_}', {u})" for k, v_, u in FIXED_ROWS)
    return [
        f"CREATE TABLE {q}{parent}{q} (id bigint PRIMARY KEY){engine}",
        f"INSERT INTO {q}{parent}{q} (id) VALUES ({PARENT_KEY})",
        f"CREATE TABLE {q}{table}{q} (k bigint, {v}, n integer, ref bigint, u bigint UNIQUE, "
        f"FOREIGN KEY (ref) REFERENCES {q}{parent}{q} (id)){engine}",
        f"INSERT INTO {q}{table}{q} (k, v, u) VALUES {fixed}",
    ]


def poison(out: Any, bad_rows: dict[str, str], *, jdbc: bool) -> Any:
    """Give each poison key of ``bad_rows`` (key -> kind) its poison row: the same on a replay.

    ``out`` has the pipeline's columns ``k`` and ``v``; for a JDBC sink the result also has the
    table's columns ``ref``, ``n`` and ``u`` (:data:`EXTRA_COLUMNS`), NULL but where a poison
    sets them.
    """
    keys: dict[str, list[str]] = {}
    for key, kind in bad_rows.items():
        keys.setdefault(kind, []).append(str(int(key)))
    exprs = []
    for column in ("v", *(EXTRA_COLUMNS if jdbc else ())):
        otherwise = "v" if column == "v" else f"CAST(NULL AS {EXTRA_COLUMNS[column]})"
        cases = " ".join(
            f"WHEN k IN ({', '.join(keys[kind])}) THEN {POISON_SQL[kind][1]}"
            for kind in sorted(keys)
            if POISON_SQL[kind][0] == column
        )
        value = f"CASE {cases} ELSE {otherwise} END" if cases else otherwise
        exprs.append(f"{value} AS {column}")
    return out.selectExpr("k", *exprs)
