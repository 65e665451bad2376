"""twophase's metrics through the OpenTelemetry API: one definition list, recorded on the driver.

:data:`METRICS` defines every instrument (name, kind, unit, meaning); the docs'
Monitoring page is rendered from it. Instruments are made on first use from the
meter ``twophase`` of the global ``MeterProvider`` -- a no-op until the
application (or :mod:`twophase._metrics._otel_setup`) installs the SDK, and the API's
proxy forwards to a provider set later. Everything is recorded on the driver,
from a finished batch's :class:`~twophase.BatchMetrics` (which carries what the
participants reported in phase 1) and from the driver's own listings of the
target; the observable gauges read what this module last saw. See
``docs/monitoring.md``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._version import __version__

if TYPE_CHECKING:
    # Imported when the first batch records (not by the executors, which record nothing).
    from opentelemetry import metrics as otel

__all__ = [
    "ATTRIBUTES",
    "METRICS",
    "MetricDefinition",
    "attributes_of",
    "observe_in_doubt",
    "record_batch",
    "record_failed_batch",
    "record_last_committed",
    "record_recovered_rows",
    "record_zombies",
    "use_meter_provider",
]

#: Bucket bounds of the duration histograms, in seconds (the API's default is for milliseconds).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclass(frozen=True)
class MetricDefinition:
    """One instrument: what the Monitoring page lists and what :func:`record_batch` records.

    Attributes
    ----------
    name
        OpenTelemetry name (dots); Prometheus shows :attr:`prometheus_name`.
    kind
        ``"counter"``, ``"histogram"`` or ``"gauge"`` (observable).
    unit
        UCUM unit (``s``, ``By``) or an annotation such as ``{batch}``.
    description
        What it counts or measures.
    attributes
        Attributes beyond :data:`ATTRIBUTES`.
    """

    name: str
    kind: str
    unit: str
    description: str
    attributes: tuple[str, ...] = ()

    @property
    def prometheus_name(self) -> str:
        """Return the name a Prometheus scrape shows (the exporter's translation)."""
        name = self.name.replace(".", "_")
        suffix = {"s": "seconds", "By": "bytes"}.get(self.unit)
        if suffix and not name.endswith(f"_{suffix}"):
            name += f"_{suffix}"
        return name + ("_total" if self.kind == "counter" else "")


#: The attributes of every metric: sink name, commit protocol, target kind. Bounded: never a
#: batch id, transaction id or setting value.
ATTRIBUTES = ("twophase.sink", "twophase.protocol", "twophase.target")

_C, _H, _G = "counter", "histogram", "gauge"
#: Every metric twophase reports, in the order of the Monitoring page.
METRICS = (
    MetricDefinition(
        "twophase.batches",
        _C,
        "{batch}",
        "Micro-batches finished by the sink, by `outcome`: `committed`, `already-committed` "
        "(a replay skipped), `failed` (the batch raised; Spark fails or retries the query)",
        ("outcome",),
    ),
    MetricDefinition(
        "twophase.rows",
        _C,
        "{row}",
        "Rows committed: a batch's when it commits, or when recovery commits it from its "
        "decision (rows of partitions skipped on replay are not counted again)",
    ),
    MetricDefinition(
        "twophase.rows.dead_lettered",
        _C,
        "{row}",
        "Rows the target refused and the sink set aside as dead letters (`bad_rows="
        '"dead_letter"`), committed with their batch, by `error_class` (`not_null`, '
        "`too_long`, ...): not counted in `twophase.rows`",
        ("error_class",),
    ),
    MetricDefinition(
        "twophase.bytes",
        _C,
        "By",
        "Arrow bytes the participants handed to the sink's `write` hook (reported in phase 1)",
    ),
    MetricDefinition(
        "twophase.transactions", _C, "{transaction}", "Transactions opened (non-empty partitions)"
    ),
    MetricDefinition(
        "twophase.partitions.skipped",
        _C,
        "{partition}",
        "Markers protocol: partitions not written again because their marker showed them committed",
    ),
    MetricDefinition(
        "twophase.phase1.duration",
        _H,
        "s",
        "Phase 1 per batch: the Spark job running the participants (write, prepare or commit)",
    ),
    MetricDefinition(
        "twophase.decision.duration",
        _H,
        "s",
        "Recording the commit decision (coordinated) or the intent (markers) in the log",
    ),
    MetricDefinition(
        "twophase.phase2.duration",
        _H,
        "s",
        "Phase 2 per batch: the driver's commits and the `committed` record (markers: the record)",
    ),
    MetricDefinition(
        "twophase.target.time",
        _C,
        "s",
        "Time the participants spent in the sink's hooks on the executors (begin, write, "
        "prepare or commit), summed over partitions; reported in phase 1",
    ),
    MetricDefinition(
        "twophase.commit.retries",
        _C,
        "{retry}",
        "Transient commit failures retried in phase 2 under the sink's retry policy",
    ),
    MetricDefinition(
        "twophase.transactions.recovered",
        _C,
        "{transaction}",
        "Transactions finished by recovery or a sweep, by `action`: `committed` (from a "
        "recorded decision), `aborted` (in doubt with no decision, or an orphan)",
        ("action",),
    ),
    MetricDefinition(
        "twophase.transactions.zombie",
        _C,
        "{transaction}",
        "Coordinated protocol: transactions prepared by an attempt Spark had given up on (a "
        "zombie) after its batch was swept, found and rolled back by a later sweep",
    ),
    MetricDefinition(
        "twophase.batch.last_committed",
        _G,
        "{batch}",
        "Id of the last batch known committed (from the log when a run starts, then per batch)",
    ),
    MetricDefinition(
        "twophase.batch.last_committed.age",
        _G,
        "s",
        "Seconds since the last batch was recorded committed: grows while no batch commits",
    ),
    MetricDefinition(
        "twophase.transactions.in_doubt",
        _G,
        "{transaction}",
        "Coordinated protocol: prepared transactions the driver left in doubt at its last "
        "listing of the target (a pending decision, a later batch); 0 when all is finished",
    ),
    MetricDefinition(
        "twophase.transactions.in_doubt.age",
        _G,
        "s",
        "Seconds since the driver first saw the oldest of those transactions in doubt",
    ),
)


@dataclass
class _SinkState:
    """What the gauges report for one sink: the last commit and what was left in doubt."""

    last_batch: int | None = None
    last_time: float | None = None
    in_doubt: dict[str, float] | None = None


_LOCK = threading.Lock()
_STATES: dict[tuple[tuple[str, str], ...], _SinkState] = {}
_instruments: dict[str, Any] | None = None
_provider: otel.MeterProvider | None = None


def use_meter_provider(provider: otel.MeterProvider | None) -> None:
    """Record into ``provider`` instead of the global one (None: the global one again).

    For tests and benchmarks, which need a provider of their own in a process
    whose global provider can be set only once. Forgets the gauges' state.
    """
    global _instruments, _provider
    with _LOCK:
        _provider, _instruments = provider, None
        _STATES.clear()


def attributes_of(sink: Any) -> dict[str, str]:
    """Return the attributes of every metric of ``sink``: its name, protocol and target kind."""
    protocol = getattr(sink, "protocol", None)
    return {
        "twophase.sink": str(sink.name),
        "twophase.protocol": str(getattr(protocol, "value", protocol)),
        "twophase.target": str(getattr(sink, "metrics_target", "custom")),
    }


def _key(attributes: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(attributes.items()))


def _state(attributes: dict[str, str]) -> _SinkState:
    return _STATES.setdefault(_key(attributes), _SinkState())


def _make(meter: otel.Meter, definition: MetricDefinition) -> Any:
    args = (definition.name, definition.unit, definition.description)
    if definition.kind == _C:
        return meter.create_counter(*args)
    if definition.kind == _H:
        return meter.create_histogram(*args, explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
    callback = _GAUGE_CALLBACKS[definition.name]
    return meter.create_observable_gauge(
        definition.name, [callback], definition.unit, definition.description
    )


def _get() -> dict[str, Any]:
    """Return the instruments, made on first use (also configuring an SDK from ``OTEL_*``)."""
    global _instruments
    made = _instruments
    if made is not None:
        return made
    if _provider is None:
        from . import _otel_setup

        _otel_setup.configure()
    from opentelemetry import metrics as otel

    with _LOCK:
        if _instruments is None:
            source = _provider if _provider is not None else otel.get_meter_provider()
            meter = source.get_meter("twophase", __version__)
            _instruments = {d.name: _make(meter, d) for d in METRICS}
        return _instruments


def record_batch(metrics: Any) -> None:
    """Record a finished batch: counts, durations, and the last committed batch.

    Runs on the driver, once per batch, from :meth:`twophase.BatchMetrics.emit`
    (``metrics``: typed loosely, as this module is below ``_metrics``).
    """
    instruments = _get()
    attributes = {
        "twophase.sink": metrics.sink,
        "twophase.protocol": metrics.protocol,
        "twophase.target": metrics.target,
    }
    instruments["twophase.batches"].add(1, {**attributes, "outcome": metrics.outcome})
    for name, value in (
        ("twophase.rows", metrics.rows),
        ("twophase.bytes", metrics.arrow_bytes),
        ("twophase.transactions", metrics.transactions),
        ("twophase.partitions.skipped", metrics.skipped_partitions),
        ("twophase.target.time", metrics.target_seconds),
        ("twophase.commit.retries", metrics.commit_retries),
    ):
        if value:
            instruments[name].add(value, attributes)
    _count_dead_letters(instruments, attributes, metrics.dead_lettered_by_class)
    for action, count in (
        ("committed", metrics.recovered_committed),
        ("aborted", metrics.recovered_aborted),
    ):
        if count:
            instruments["twophase.transactions.recovered"].add(
                count, {**attributes, "action": action}
            )
    if metrics.outcome == "committed":
        for name, seconds in (
            ("twophase.phase1.duration", metrics.phase1_seconds),
            ("twophase.decision.duration", metrics.decision_seconds),
            ("twophase.phase2.duration", metrics.phase2_seconds),
        ):
            instruments[name].record(seconds, attributes)
    # A replay of the batch the log's last record names keeps that record's time.
    replay = metrics.outcome != "committed"
    record_last_committed(attributes, metrics.batch_id, time.time(), newer_only=replay)


def record_failed_batch(sink: Any) -> None:
    """Count a batch that raised (outcome ``failed``). Runs on the driver."""
    _get()["twophase.batches"].add(1, {**attributes_of(sink), "outcome": "failed"})


def record_last_committed(
    attributes: dict[str, str], batch_id: int, when: float, *, newer_only: bool = False
) -> None:
    """Note that ``batch_id`` is committed, recorded at ``when`` (epoch seconds).

    Ignored for a batch older than the one noted (or as old, with ``newer_only``).
    """
    _get()
    with _LOCK:
        state = _state(attributes)
        last = state.last_batch
        if last is None or batch_id > last or (batch_id == last and not newer_only):
            state.last_batch, state.last_time = batch_id, when


def record_recovered_rows(sink: Any, rows: int) -> None:
    """Count the rows of a batch recovery committed from its decision. Runs on the driver."""
    if rows:
        _get()["twophase.rows"].add(rows, attributes_of(sink))


def record_recovered_dead_letters(sink: Any, by_class: Mapping[str, int]) -> None:
    """Count the dead letters of a batch recovery committed from its decision (driver)."""
    _count_dead_letters(_get(), attributes_of(sink), by_class)


def _count_dead_letters(
    instruments: dict[str, Any], attributes: dict[str, str], by_class: Mapping[str, int]
) -> None:
    for error_class, count in by_class.items():
        if isinstance(count, int) and count > 0:
            instruments["twophase.rows.dead_lettered"].add(
                count, {**attributes, "error_class": str(error_class)}
            )


def record_zombies(sink: Any, count: int) -> None:
    """Count transactions of zombie attempts rolled back by a sweep. Runs on the driver."""
    if count:
        _get()["twophase.transactions.zombie"].add(count, attributes_of(sink))


def observe_in_doubt(sink: Any, transaction_ids: Iterable[str]) -> None:
    """Note the transactions the driver left in doubt at its latest listing of the target."""
    _get()
    now = time.time()
    with _LOCK:
        state = _state(attributes_of(sink))
        seen = state.in_doubt or {}
        state.in_doubt = {t: seen.get(t, now) for t in transaction_ids}


def _observations(value: Any) -> Iterator[otel.Observation]:
    from opentelemetry.metrics import Observation

    with _LOCK:
        states = [(dict(key), state) for key, state in _STATES.items()]
    now = time.time()
    for attributes, state in states:
        measured = value(state, now)
        if measured is not None:
            yield Observation(measured, attributes)


def _last_committed(state: _SinkState, now: float) -> float | None:
    return state.last_batch


def _last_committed_age(state: _SinkState, now: float) -> float | None:
    return None if state.last_time is None else max(0.0, now - state.last_time)


def _in_doubt(state: _SinkState, now: float) -> float | None:
    return None if state.in_doubt is None else len(state.in_doubt)


def _in_doubt_age(state: _SinkState, now: float) -> float | None:
    if state.in_doubt is None:
        return None
    return max(0.0, now - min(state.in_doubt.values())) if state.in_doubt else 0.0


def _gauge(value: Any) -> Any:
    def callback(options: otel.CallbackOptions) -> Iterator[otel.Observation]:
        return _observations(value)

    return callback


_GAUGE_CALLBACKS = {
    "twophase.batch.last_committed": _gauge(_last_committed),
    "twophase.batch.last_committed.age": _gauge(_last_committed_age),
    "twophase.transactions.in_doubt": _gauge(_in_doubt),
    "twophase.transactions.in_doubt.age": _gauge(_in_doubt_age),
}
