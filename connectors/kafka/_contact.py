"""The driver's first contact with the cluster: an admin client reaching the brokers, or why not.

Used by ``open()``'s checks (:mod:`._checks`): credentials the brokers refuse
fail at once, brokers that stay unreachable fail after ``operation_timeout``,
naming ``bootstrap.servers``.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from twophase.errors import ConfigurationError, RetriableError

from ._errors import KafkaErrorContext, kafka_error_of, map_kafka_error
from ._options import KafkaOptions

__all__ = ["connect"]

#: Codes of the client's error events meaning the brokers refused the
#: credentials: waiting longer cannot help, so ``open()`` fails at once.
_AUTH_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})

#: Codes meaning "no broker answered (yet)": ``open()`` keeps trying until
#: ``operation_timeout``.
_UNREACHABLE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
    }
)

#: Seconds of the first metadata request of ``open()``; each retry waits twice
#: as long (a slow cluster still answers a long one), up to the deadline.
_FIRST_CONTACT_SLICE = 0.5


def connect(options: KafkaOptions) -> tuple[AdminClient, list[int]]:
    """Create the admin client of ``open()`` and reach the cluster with it.

    The client's error events are watched while it waits for the first
    metadata response: brokers that refuse the credentials fail at once (not
    after the timeout, as an unexplained transport error), and brokers that
    stay unreachable fail after ``operation_timeout`` seconds, naming
    ``bootstrap.servers`` and the last error seen. A user's ``error_cb`` is
    still called.

    Parameters
    ----------
    options
        The sink's settings.

    Returns
    -------
    tuple of (AdminClient, list of int)
        The client, and the ids of the brokers.

    Raises
    ------
    ConfigurationError
        When librdkafka refuses the client settings, or the brokers refuse
        the credentials.
    RetriableError
        When no broker answers within ``operation_timeout`` (nothing was
        written; restarting the query once the brokers are up is safe).
    """
    sink, timeout = options.sink, options.operation_timeout
    servers = options.client_config.get("bootstrap.servers")
    events: list[KafkaError] = []
    user_cb = options.client_config.get("error_cb")

    def on_error(err: KafkaError) -> None:
        events.append(err)
        if callable(user_cb):
            user_cb(err)

    conf: dict[str, Any] = {**options.client_config, "error_cb": on_error}
    try:
        admin = AdminClient(conf)
    except KafkaException as exc:
        raise ConfigurationError(
            f"librdkafka refused the client configuration: {exc.args[0].str()}",
            sink=sink,
            setting="producer_config",
        ) from exc
    deadline = time.monotonic() + timeout
    wait = _FIRST_CONTACT_SLICE
    while True:
        try:
            metadata = admin.list_topics(timeout=max(0.05, min(wait, deadline - time.monotonic())))
            return admin, sorted(metadata.brokers)
        except KafkaException as exc:
            admin.poll(0)  # serves the error events to on_error
            err = kafka_error_of(exc)
            denied = next((e for e in events if e.code() in _AUTH_CODES), None)
            if denied is not None:
                raise ConfigurationError(
                    f"the brokers at bootstrap.servers={servers!r} refused the credentials: "
                    f"{denied.str()}. Check security.protocol, sasl.mechanism, sasl.username and "
                    "sasl.password (or the ssl.* settings)",
                    sink=sink,
                    setting="sasl.username/sasl.password" if "SASL" in denied.str() else "ssl.*",
                ) from exc
            if err is not None and err.code() not in _UNREACHABLE_CODES and not err.retriable():
                raise map_kafka_error(
                    err, KafkaErrorContext(sink, action="connecting to the brokers")
                ) from exc
            if time.monotonic() >= deadline - 0.01:
                last = events[-1].str() if events else (err.str() if err is not None else exc)
                raise RetriableError(
                    f"no broker at bootstrap.servers={servers!r} answered within {timeout:g} s "
                    f"(operation_timeout); last error: {last}. Check the address and that the "
                    "brokers are up and reachable from the driver, then restart the query: "
                    "nothing was written",
                    sink=sink,
                    setting="bootstrap.servers",
                ) from exc
            wait *= 2
