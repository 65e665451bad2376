"""The PySpark versions twophase runs on, and the one place that knows how they differ.

twophase supports PySpark 3.5 to 4.x (:data:`SUPPORTED`). PySpark is not a
dependency of the package: platforms bring their own (Databricks, EMR, Dataproc),
and ``pip install 'twophase[spark]'`` installs one for everyone else. Importing
twophase works without PySpark (the test kit runs sinks without Spark); what
needs Spark calls :func:`require`, which names the supported range when PySpark
is missing, and importing twophase next to a PySpark outside the range fails at
once, naming it.

Everything that differs between versions lives here, each behind a function
with a test on every supported version (``scripts/compat.sh``):

* :func:`arrow_schema` -- the Arrow schema ``mapInArrow`` hands the
  participants. PySpark has no public API for it; its private
  ``to_arrow_schema`` grew keyword arguments over the versions (3.5 has none,
  4.0 and 4.1 have ``prefers_large_types`` and ``timestamp_utc``, 4.2 has
  ``timezone`` instead of the latter), so only the ones the installed version accepts are
  passed, and timestamps get the session's time zone in every version.
* :func:`cloudpickle` -- the pickler Spark ships functions with (PySpark's own
  copy), or the ``cloudpickle`` package where PySpark is absent (the test kit).
* :func:`connect_active_queries` -- the running queries a Spark Connect
  ``foreachBatch`` worker can see. Up to 4.2 the batch's session is the session
  that started the query; from 4.3 it is a clone of it with its own (empty)
  query manager, so the worker also asks the query's root session, reached
  through the server-local URL the worker was started with.
* :func:`connect_record_failure` and :func:`connect_recorded_failure` -- the
  error that failed a Connect ``foreachBatch`` batch. From 4.0 the server sends
  its text to the client with the query's failure; in 3.5 the worker just dies
  (its TODO SPARK-44463) and the query fails with the JVM's ``EOFException``
  and no text, so the worker leaves the twophase error in the query's session
  configuration, under the query's run id, and the client reads it from there.
* :func:`stopped_batch_message` -- what a classic ``foreachBatch`` function interrupted by
  ``query.stop()`` raises, short. Spark's ``StreamExecution`` (3.5 to 4.3) tells a stop from a
  failure by matching the Python traceback py4j hands back against
  ``py4j.protocol.Py4JJavaError: An error occurred while calling`` followed by any characters
  (an alternation per character, which ``java.util.regex`` matches recursively) and an
  interrupt exception's name: a traceback carrying a Java stack overflows the stream thread's
  stack (``StackOverflowError``).
* :func:`require_feature` -- refuses, by name, what a version lacks: the Python
  data source writer behind ``format(...)`` needs ``DataSourceStreamArrowWriter``
  (PySpark 4.1), ``trigger(realTime=...)`` Spark's real-time mode (4.1).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from typing import Any

import pyarrow as pa

from .errors import ConfigurationError

__all__ = [
    "SUPPORTED",
    "arrow_schema",
    "cloudpickle",
    "connect_active_queries",
    "connect_loses_batch_errors",
    "connect_record_failure",
    "connect_recorded_failure",
    "connect_session_id",
    "installed_version",
    "require",
    "require_feature",
    "stopped_batch_message",
]

#: The PySpark versions twophase supports, as pip writes them.
SUPPORTED = ">=3.5,<5"
_LOWEST = (3, 5)
_BEYOND = (5, 0)

#: What a feature needs: (the version it appeared in, what it is, what to use before it).
_FEATURES: dict[str, tuple[tuple[int, int], str, str]] = {
    "format": (
        (4, 1),
        "format(...) needs PySpark {since} or later (its Python data source writer, "
        "DataSourceStreamArrowWriter)",
        "Use foreachBatch(sink) (twophase.write_stream), which every supported version runs",
    ),
    "realtime": (
        (4, 1),
        "trigger(realTime=...) needs PySpark {since} or later (Spark's real-time mode)",
        "Use a micro-batch trigger ({'processingTime': '1 second'}) on this version",
    ),
}


def _parse(text: str) -> tuple[int, int, int]:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        raise ValueError(f"not a PySpark version: {text!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


@functools.cache
def installed_version() -> tuple[int, int, int] | None:
    """Return the installed PySpark's version, or None when there is none.

    Returns
    -------
    tuple of int or None
        ``(major, minor, patch)``.
    """
    try:
        import pyspark
    except ImportError:
        return None
    return _parse(str(getattr(pyspark, "__version__", "0.0.0")))


@functools.cache
def cloudpickle() -> Any:
    """Return PySpark's copy of cloudpickle, or the ``cloudpickle`` package without PySpark.

    Returns
    -------
    module
        A module with ``dumps``.
    """
    try:
        from pyspark import cloudpickle as bundled
    except ImportError:  # no PySpark: the test kit alone
        import cloudpickle as package

        return package
    return bundled


def connect_session_id(session: Any) -> str | None:
    """Return the id of a Spark Connect client session (None for a classic session).

    Parameters
    ----------
    session
        A SparkSession.

    Returns
    -------
    str or None
        The session id the Connect server knows the session by.
    """
    value = getattr(session, "session_id", None)
    return value if isinstance(value, str) else None


#: Connect sessions this foreachBatch worker opened on query root sessions, by session id.
_ROOT_SESSIONS: dict[str, Any] = {}


def connect_active_queries(session: Any, root_session_id: str | None) -> dict[str, str]:
    """Return the running queries a Connect ``foreachBatch`` worker sees: query id -> run id.

    Parameters
    ----------
    session
        The micro-batch DataFrame's session.
    root_session_id
        The id of the client session that started the query, when known
        (:func:`connect_session_id` on the client).

    Returns
    -------
    dict of str to str
        The active queries of the batch's session and, when that session is a clone
        (PySpark 4.3 and later), of the root session as well.
    """
    active = {str(q.id): str(q.runId) for q in session.streams.active}
    own = connect_session_id(session)
    if root_session_id is None or root_session_id == own:
        return active
    url = os.environ.get("SPARK_CONNECT_LOCAL_URL")  # set for the server's Python workers
    if not url:
        return active
    root = _ROOT_SESSIONS.get(root_session_id)
    if root is None:
        from pyspark.sql.connect.session import SparkSession

        # create(), not getOrCreate(): the latter would hand back the batch's own session.
        root = SparkSession.builder.remote(f"{url};session_id={root_session_id}").create()
        _ROOT_SESSIONS[root_session_id] = root
    active.update({str(q.id): str(q.runId) for q in root.streams.active})
    return active


#: The session setting, followed by the query's run id, that carries a failed batch's error.
_FAILURE_KEY = "spark.twophase.connect.batchError."


def connect_loses_batch_errors() -> bool:
    """Return whether a Connect ``foreachBatch`` error reaches the client without its text.

    PySpark 3.5's ``foreachBatch`` worker does not send the error of the function back to
    the server (the TODO SPARK-44463 in its code; the 4.0 worker sends it): it dies, and the
    query fails with ``EOFException``.

    Returns
    -------
    bool
        True before PySpark 4.0.
    """
    version = installed_version()
    return version is not None and version < (4, 0, 0)


def connect_record_failure(session: Any, run_id: str, error: str) -> None:
    """Leave the error of a failed batch where the client can read it (before PySpark 4.0).

    Runs in the Connect server's ``foreachBatch`` worker, whose session is the one that
    started the query: the error goes into that session's configuration, under the run id.
    Nothing is done where the server sends the error itself.

    Parameters
    ----------
    session
        The micro-batch DataFrame's session.
    run_id
        The failed query's run id.
    error
        The error as a traceback ends (``twophase.errors.DataError: [sink='s'] ...``).
    """
    if connect_loses_batch_errors():
        session.conf.set(_FAILURE_KEY + run_id, error)


def connect_recorded_failure(query: Any) -> str | None:
    """Return (and remove) the error recorded by :func:`connect_record_failure` for ``query``.

    Parameters
    ----------
    query
        A ``StreamingQuery`` that failed.

    Returns
    -------
    str or None
        The error's text; None for a classic query, from PySpark 4.0, or when none was
        recorded (the failure was not a twophase error, or the session was gone).
    """
    if not connect_loses_batch_errors():
        return None
    session = getattr(query, "_session", None)  # Connect's StreamingQuery only
    if session is None or connect_session_id(session) is None:
        return None
    key = _FAILURE_KEY + str(query.runId)
    try:
        recorded = session.conf.get(key, None)
        if recorded:
            session.conf.unset(key)
    except Exception:  # the session or the server is gone: PySpark's own error stands
        return None
    return str(recorded) if recorded else None


#: What Spark's StreamExecution.PROXY_ERROR looks for (3.5 to 4.3): the text of a py4j error
#: followed by one of IO_EXCEPTION_NAMES.
_PROXY_ERROR_PREFIX = "py4j.protocol.Py4JJavaError: An error occurred while calling"
_INTERRUPTED = "java.lang.InterruptedException"


def stopped_batch_message(sink: str, batch_id: int) -> str:
    """Return the short error a classic ``foreachBatch`` function raises when the query is stopped.

    Spark recognises it as an interruption by ``query.stop()`` (the query then stops
    cleanly), and it is short enough for the regular expression Spark matches it with.

    Parameters
    ----------
    sink, batch_id
        For the message.

    Returns
    -------
    str
        One line, under 300 characters.
    """
    return (
        f"{_PROXY_ERROR_PREFIX} Spark while the query was stopped: {_INTERRUPTED} "
        f"(sink {sink!r}, batch {batch_id}: query.stop() interrupted it; the batch runs "
        "again when the query starts)"
    )


def _describe(version: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in version)


def check_installed() -> None:
    """Refuse a PySpark outside :data:`SUPPORTED` (run when twophase is imported).

    Raises
    ------
    ImportError
        Naming the version found and the supported range.
    """
    version = installed_version()
    if version is not None and not _LOWEST <= version[:2] < _BEYOND:
        raise ImportError(
            f"twophase supports PySpark {SUPPORTED}; this environment has PySpark "
            f"{_describe(version)}. Install a supported version (pip install "
            f"'pyspark{SUPPORTED}'), or run twophase where the platform's Spark is one"
        )


def require(what: str) -> tuple[int, int, int]:
    """Return the installed PySpark's version, or refuse when there is none.

    Parameters
    ----------
    what
        What needs Spark, for the message (``"write_stream"``, ...).

    Returns
    -------
    tuple of int
        The version.

    Raises
    ------
    ConfigurationError
        PySpark is not installed; the message names the supported range.
    """
    version = installed_version()
    if version is None:
        raise ConfigurationError(
            f"{what} needs PySpark {SUPPORTED}, and none is installed: use the platform's "
            "Spark, or pip install 'twophase[spark]'",
            setting="pyspark",
        )
    return version


def require_feature(feature: str, sink: str | None = None) -> None:
    """Refuse a feature the installed PySpark lacks, naming both.

    Parameters
    ----------
    feature
        A key of the feature table (``"format"``).
    sink
        The sink, for the message.

    Raises
    ------
    ConfigurationError
        The installed version is older than the feature.
    """
    version = require(f"{feature}()")
    since, what, instead = _FEATURES[feature]
    if version[:2] < since:
        raise ConfigurationError(
            f"{what.format(since=f'{since[0]}.{since[1]}')}; this is PySpark "
            f"{_describe(version)}. {instead}",
            sink=sink,
            setting="pyspark",
        )


def _with_time_zone(kind: pa.DataType, zone: str) -> pa.DataType:
    """``kind`` with every zoned timestamp in ``zone`` (before 4.2 they always say UTC)."""
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return pa.timestamp(kind.unit, tz=zone)
    if pa.types.is_struct(kind):
        return pa.struct(
            [_field_with_time_zone(kind.field(i), zone) for i in range(kind.num_fields)]
        )
    if pa.types.is_large_list(kind):
        return pa.large_list(_field_with_time_zone(kind.value_field, zone))
    if pa.types.is_list(kind):
        return pa.list_(_field_with_time_zone(kind.value_field, zone))
    if pa.types.is_map(kind):
        return pa.map_(
            _field_with_time_zone(kind.key_field, zone),
            _field_with_time_zone(kind.item_field, zone),
        )
    return kind


def _field_with_time_zone(field: pa.Field, zone: str) -> pa.Field:
    return field.with_type(_with_time_zone(field.type, zone))


def arrow_schema(
    schema: Any, *, timezone: str | None = None, prefers_large_types: bool = False
) -> pa.Schema:
    """Return the Arrow schema of ``schema`` as ``mapInArrow`` hands it to a participant.

    Parameters
    ----------
    schema
        A ``pyspark.sql.types.StructType``.
    timezone
        The session time zone (``spark.sql.session.timeZone``); None keeps
        what the installed version makes of timestamps.
    prefers_large_types
        ``spark.sql.execution.arrow.useLargeVarTypes`` (4.0 and later).

    Returns
    -------
    pyarrow.Schema
        The schema.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    accepted = inspect.signature(to_arrow_schema).parameters
    options: dict[str, Any] = {}
    if "timezone" in accepted and timezone is not None:
        options["timezone"] = timezone
    if "prefers_large_types" in accepted:
        options["prefers_large_types"] = prefers_large_types
    converted = to_arrow_schema(schema, **options)
    if timezone is None:
        return converted
    return pa.schema(
        [_field_with_time_zone(field, timezone) for field in converted],
        metadata=converted.metadata,
    )


check_installed()
