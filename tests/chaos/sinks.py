"""The connectors' sinks with probes: every hook call is an event, and may pause at a chosen point.

``ChaosKafkaSink``, ``ChaosPostgresTwoPhaseSink``, ``ChaosPostgresMarkerSink``,
``ChaosMariaDBTwoPhaseSink`` and ``ChaosMariaDBMarkerSink`` are subclasses of the public connector
classes that only add :func:`tests.chaos.events.probe` calls around the
participant hooks (``begin_transaction``, the first ``write`` of a transaction, ``pre_commit`` /
``commit_with_marker`` and their completion). The sink is built by the connector's own constructor
and re-classed (:func:`instrument`), as :func:`twophase.testing.with_faults` does.

Spark pickles the sink to its Python workers by class reference. ``with_faults`` makes its classes
at run time, which a worker process cannot import; :meth:`_Probed.__reduce_ex__` therefore pickles
the probed sink by its base class and fault rules, and the worker rebuilds the same wrapping.
"""

from __future__ import annotations

from typing import Any

from tests.chaos.events import probe
from twophase.connectors.jdbc import (
    MariaDBMarkerSink,
    MariaDBTwoPhaseSink,
    PostgresMarkerSink,
    PostgresTwoPhaseSink,
)
from twophase.connectors.kafka import KafkaSink
from twophase.testing import FakeTarget, with_faults

__all__ = ["instrument"]

#: Attributes ``with_faults`` adds to its copy; rebuilt, not pickled.
_FAULT_ATTRS = ("_faults", "_fault_contexts")


class _Probed:
    """Probe events around the participant hooks (executor side)."""

    _chaos_kind = ""
    _chaos: dict[str, Any]

    def _probe(self, name: str, context: Any, txn: Any = None) -> None:
        chaos = self._chaos
        # A Kafka transaction's id names its coordinator (a broker_restart's target).
        tid = getattr(txn, "transactional_id", None) if txn is not None else None
        probe(
            chaos["events"],
            chaos["control"],
            chaos["pauses"],
            src="task",
            name=name,
            batch=context.batch_id,
            partition=context.partition_id,
            attempt=context.attempt,
            identity=context.identity,
            epoch=context.epoch,
            **({"tid": tid} if tid else {}),
        )

    def _context(self, txn: Any) -> Any:
        return self.__dict__.setdefault("_chaos_txns", {}).get(id(txn))

    def begin_transaction(self, context: Any) -> Any:
        self._probe("begin_transaction", context)
        txn = super().begin_transaction(context)  # type: ignore[misc]
        self.__dict__.setdefault("_chaos_txns", {})[id(txn)] = [context, False]
        return txn

    def write(self, txn: Any, batch: Any) -> Any:
        # What the sink returns are the rows the target refused (RowErrors): handed on, or
        # bad_rows="dead_letter" would lose them.
        refused = super().write(txn, batch)  # type: ignore[misc]
        entry = self._context(txn)
        if entry is not None and not entry[1]:
            entry[1] = True  # once per transaction: after its first rows are in
            self._probe("write", entry[0], txn)
        return refused

    def __reduce_ex__(self, protocol: Any) -> Any:
        state = {k: v for k, v in self.__dict__.items() if k not in (*_FAULT_ATTRS, "_chaos_txns")}
        return (_rebuild, (self._chaos_kind, state, self.__dict__.get("_faults")))


class _ProbedPrepare(_Probed):
    """The coordinated protocol: probes around ``pre_commit`` too."""

    def pre_commit(self, txn: Any) -> Any:
        entry = self._context(txn)
        if entry is not None:
            self._probe("pre_commit", entry[0])
        handle = super().pre_commit(txn)  # type: ignore[misc]
        if entry is not None:
            self._probe("pre_commit_done", entry[0])
        return handle


class _ProbedMarkers(_Probed):
    """The markers protocol: probes around ``commit_with_marker`` too."""

    def commit_with_marker(self, txn: Any, marker: Any) -> None:
        entry = self._context(txn)
        if entry is not None:
            self._probe("commit_with_marker", entry[0], txn)
        super().commit_with_marker(txn, marker)  # type: ignore[misc]
        if entry is not None:
            self._probe("commit_with_marker_done", entry[0])


class ChaosKafkaSink(_ProbedMarkers, KafkaSink):
    """:class:`KafkaSink` with probes."""

    _chaos_kind = "kafka"


class ChaosPostgresTwoPhaseSink(_ProbedPrepare, PostgresTwoPhaseSink):
    """:class:`PostgresTwoPhaseSink` (the coordinated protocol) with probes."""

    _chaos_kind = "pg-coordinated"


class ChaosPostgresMarkerSink(_ProbedMarkers, PostgresMarkerSink):
    """:class:`PostgresMarkerSink` (the markers protocol) with probes."""

    _chaos_kind = "pg-markers"


class ChaosMariaDBTwoPhaseSink(_ProbedPrepare, MariaDBTwoPhaseSink):
    """:class:`MariaDBTwoPhaseSink` (the coordinated protocol, XA) with probes."""

    _chaos_kind = "maria-coordinated"


class ChaosMariaDBMarkerSink(_ProbedMarkers, MariaDBMarkerSink):
    """:class:`MariaDBMarkerSink` (the markers protocol) with probes."""

    _chaos_kind = "maria-markers"


_CLASSES: dict[str, type[Any]] = {
    "kafka": ChaosKafkaSink,
    "pg-coordinated": ChaosPostgresTwoPhaseSink,
    "pg-markers": ChaosPostgresMarkerSink,
    "maria-coordinated": ChaosMariaDBTwoPhaseSink,
    "maria-markers": ChaosMariaDBMarkerSink,
    # The replicated targets (tests/chaos/ha.py): the same sinks, built on other settings.
    "kafka-ha": ChaosKafkaSink,
    "pg-coordinated-ha": ChaosPostgresTwoPhaseSink,
    "pg-markers-ha": ChaosPostgresMarkerSink,
    "maria-coordinated-ha": ChaosMariaDBTwoPhaseSink,
    "maria-markers-ha": ChaosMariaDBMarkerSink,
    # The real-time trials (tests/chaos/realtime.py): the markers sinks, in real-time mode.
    "pg-markers-rt": ChaosPostgresMarkerSink,
    "maria-markers-rt": ChaosMariaDBMarkerSink,
    "kafka-rt": ChaosKafkaSink,
}


def _rebuild(kind: str, state: dict[str, Any], faults: FakeTarget | None) -> Any:
    sink = object.__new__(_CLASSES[kind])
    sink.__dict__.update(state)
    return with_faults(sink, faults) if faults is not None else sink


def instrument(
    sink: Any, kind: str, chaos: dict[str, Any], faults: FakeTarget | None = None
) -> Any:
    """Return a probed copy of a connector's sink, wrapped by ``with_faults`` if rules are given.

    Parameters
    ----------
    sink
        A sink built by the connector (``KafkaSink(...)``, ``postgres_sink(...)`` or
        ``mariadb_sink(...)``).
    kind
        A sink kind of the harness (``"kafka"``, ``"pg-coordinated"``, ``"pg-markers"``,
        ``"maria-coordinated"``, ``"maria-markers"``).
    chaos
        ``events`` (event log path), ``control`` (directory of go files) and ``pauses``.
    faults
        A directory :class:`~twophase.testing.FakeTarget` holding task-failure rules.
    """
    state = dict(sink.__dict__)
    state["_chaos"] = chaos
    return _rebuild(kind, state, faults)
