"""The sink's settings, validated once where the sink is built.

:class:`KafkaOptions` is what every other module of the connector reads: the
writer, the fencing, the cluster checks. It is frozen and picklable, and
travels to the executors inside the sink. The producer configuration itself is
validated by :mod:`._config`; the Spark option names are translated by
:mod:`._spark_options`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from twophase import TaskContext
from twophase.errors import ConfigurationError

from .._settings import check_number
from ._config import (
    SecretConfig,
    client_config,
    config_key,
    normalise_producer_config,
    validate_topic_name,
)
from ._errors import KafkaErrorContext
from ._spark_options import translate_spark_options

__all__ = [
    "MAX_PRODUCER_LANES",
    "KafkaOptions",
    "arguments_from_spark_options",
    "letter_max_bytes",
]

#: Upper bound of ``producer_lanes``: recovery fences ``partition slots * lanes`` ids.
MAX_PRODUCER_LANES = 64


#: librdkafka's default ``message.max.bytes``.
_LIBRDKAFKA_MAX_BYTES = 1_000_000


def letter_max_bytes(record_max_bytes: int) -> int:
    """Return the producer's ``message.max.bytes`` for a record limit, with dead letters.

    A dead letter holds its row in JSON, bytes in base64 (4/3), with its error: twice
    the record limit and 64 KiB hold it; librdkafka takes at most 10^9.
    """
    return min(2 * record_max_bytes + 65536, 1_000_000_000)


@dataclass(frozen=True)
class KafkaOptions:
    """The validated settings of one :class:`KafkaSink`.

    Build it with :meth:`from_arguments` (the sink's keyword arguments);
    ``dataclasses.replace`` validates again. The arguments are described on
    :class:`KafkaSink`.

    Attributes
    ----------
    sink
        The sink name (named in every error).
    producer_config
        The normalised producer configuration, without ``transactional.id``:
        a :class:`._config.SecretConfig`, so that the ``repr`` of the options
        masks passwords and other secrets.
    topic, control_topic, create_control_topic, control_topic_partitions, \
control_topic_replication_factor, transactional_id_prefix, producer_lanes, operation_timeout, \
local_retries
        As the :class:`KafkaSink` arguments of the same names.
    dead_letter_topic
        Where refused rows go (``bad_rows="dead_letter"``); None when the sink fails
        on bad rows.
    record_max_bytes
        With a dead-letter topic: the ``message.max.bytes`` given, which the sink
        holds target records to itself (:mod:`._row_errors`), while the producer's is
        raised to :func:`letter_max_bytes` of it so that a refused record's dead letter
        (its row in JSON, bytes in base64) fits.
    conf_key
        Hashable form of ``producer_config``: the producer pool's key.
    client_config
        The connection and security subset, for admin clients and consumers.
    """

    sink: str
    producer_config: Mapping[str, Any]
    control_topic: str
    topic: str | None = None
    create_control_topic: bool = True
    control_topic_partitions: int = 1
    control_topic_replication_factor: int = -1
    transactional_id_prefix: str = "twophase-"
    producer_lanes: int = 4
    operation_timeout: float = 30.0
    local_retries: int = 3
    dead_letter_topic: str | None = None
    record_max_bytes: int | None = None
    conf_key: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)
    client_config: Mapping[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = self.sink
        if self.topic is not None:
            validate_topic_name(self.topic, "topic", sink=name)
        validate_topic_name(self.control_topic, "control_topic", sink=name)
        self._check(
            self.topic is None or self.topic != self.control_topic,
            "topic and control_topic must differ: consumers of the topic would read markers",
            "control_topic",
        )
        if self.dead_letter_topic is not None:
            validate_topic_name(self.dead_letter_topic, "dead_letter_topic", sink=name)
            self._check(
                self.dead_letter_topic not in (self.topic, self.control_topic),
                "dead_letter_topic must differ from topic and control_topic: consumers would "
                "read dead letters as records (or markers)",
                "dead_letter_topic",
            )
        prefix = self.transactional_id_prefix
        self._check(
            isinstance(prefix, str) and not any(c.isspace() for c in prefix),
            f"transactional_id_prefix must be a string without whitespace, got {prefix!r}",
            "transactional_id_prefix",
        )
        check_number(
            self.producer_lanes,
            "producer_lanes",
            minimum=1,
            maximum=MAX_PRODUCER_LANES,
            integer=True,
            sink=name,
        )
        check_number(
            self.control_topic_partitions,
            "control_topic_partitions",
            minimum=1,
            integer=True,
            sink=name,
        )
        replication = self.control_topic_replication_factor
        if replication != -1:
            check_number(
                replication,
                "control_topic_replication_factor",
                minimum=1,
                integer=True,
                unit=", or -1 for the broker default",
                sink=name,
            )
        check_number(
            self.operation_timeout,
            "operation_timeout",
            minimum=0,
            above=True,
            unit=" seconds",
            sink=name,
        )
        check_number(self.local_retries, "local_retries", minimum=1, integer=True, sink=name)
        if not isinstance(self.producer_config, SecretConfig):
            object.__setattr__(self, "producer_config", SecretConfig(self.producer_config))
        object.__setattr__(self, "operation_timeout", float(self.operation_timeout))
        object.__setattr__(self, "conf_key", config_key(self.producer_config))
        object.__setattr__(self, "client_config", client_config(self.producer_config))

    def _check(self, ok: bool, message: str, setting: str) -> None:
        if not ok:
            raise ConfigurationError(message, sink=self.sink, setting=setting)

    @classmethod
    def from_arguments(
        cls,
        name: str,
        *,
        bootstrap_servers: str | None = None,
        producer_config: Mapping[str, Any] | None = None,
        transaction_timeout_ms: int | None = None,
        control_topic: str | None = None,
        **settings: Any,
    ) -> KafkaOptions:
        """Validate the sink's keyword arguments.

        Parameters
        ----------
        name
            The sink name.
        bootstrap_servers, producer_config, transaction_timeout_ms
            Folded into the normalised producer configuration.
        control_topic
            The control topic; ``"<name>-twophase-markers"`` when None.
        **settings
            The other fields of :class:`KafkaOptions`.

        Returns
        -------
        KafkaOptions
            The settings.

        Raises
        ------
        ConfigurationError
            Naming the offending setting.
        """
        conf = normalise_producer_config(
            name,
            bootstrap_servers=bootstrap_servers,
            producer_config=producer_config,
            transaction_timeout_ms=transaction_timeout_ms,
        )
        control = control_topic if control_topic is not None else f"{name}-twophase-markers"
        if settings.get("dead_letter_topic") is not None:
            limit = int(conf.get("message.max.bytes", _LIBRDKAFKA_MAX_BYTES))
            conf = SecretConfig({**conf, "message.max.bytes": letter_max_bytes(limit)})
            settings["record_max_bytes"] = limit
        return cls(name, conf, control, **settings)

    def replace(self, **changes: Any) -> KafkaOptions:
        """Return a copy with some settings changed (validated again).

        Parameters
        ----------
        **changes
            Fields of :class:`KafkaOptions`.

        Returns
        -------
        KafkaOptions
            The new settings.
        """
        return dataclasses.replace(self, **changes)

    @property
    def transaction_timeout_ms(self) -> int:
        """Return the configured ``transaction.timeout.ms``."""
        return int(self.producer_config["transaction.timeout.ms"])

    def error_context(
        self,
        action: str,
        *,
        context: TaskContext | None = None,
        topic: str | None = None,
        transactional_id: str | None = None,
        elapsed: float | None = None,
    ) -> KafkaErrorContext:
        """Describe where a Kafka call failed, for :func:`._errors.map_kafka_error`.

        Parameters
        ----------
        action
            What the sink was doing.
        context
            The task, when the call ran in one.
        topic, transactional_id, elapsed
            As in :class:`._errors.KafkaErrorContext`.

        Returns
        -------
        KafkaErrorContext
            The context.
        """
        return KafkaErrorContext(
            self.sink,
            batch_id=None if context is None else context.batch_id,
            partition_id=None if context is None else context.partition_id,
            action=action,
            topic=topic,
            transactional_id=transactional_id,
            transaction_timeout_ms=self.transaction_timeout_ms,
            elapsed=elapsed,
            brokers=self.brokers,
        )

    @property
    def brokers(self) -> str | None:
        """``bootstrap.servers`` (host:port list, no secret), for error messages.

        Returns
        -------
        str or None
            The brokers, when configured.
        """
        found = self.producer_config.get("bootstrap.servers")
        return str(found) if found else None


#: Options of the map that are twophase's, not Spark's: taken as the sink's arguments.
_SINK_OPTIONS = ("bad_rows", "dead_letter_topic", "max_bad_rows")


def arguments_from_spark_options(
    name: str, options: Mapping[str, Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Merge the options of Spark's ``format("kafka")`` sink into the sink's arguments.

    Parameters
    ----------
    name
        The sink name.
    options
        The Kafka sink options (``kafka.*`` and ``topic``), and twophase's
        ``bad_rows``, ``dead_letter_topic`` and ``max_bad_rows`` (a string of digits).
    kwargs
        Other :class:`KafkaSink` arguments.

    Returns
    -------
    dict
        The keyword arguments of :class:`KafkaSink` (without ``name``).

    Raises
    ------
    ConfigurationError
        For an option twophase cannot honour, or a setting given twice.
    """
    options = dict(options)
    merged = dict(kwargs)
    for key in _SINK_OPTIONS:  # twophase's own options, beside Spark's
        if key in options:
            if key in merged:
                raise ConfigurationError(
                    f"{key} set both in the options and as an argument; set it once",
                    sink=name,
                    setting=key,
                )
            merged[key] = options.pop(key)
    if isinstance(merged.get("max_bad_rows"), str):
        text = merged["max_bad_rows"]
        if not text.strip().isdigit():
            raise ConfigurationError(
                f"max_bad_rows={text!r} is not a whole number (rows refused per batch)",
                sink=name,
                setting="max_bad_rows",
            )
        merged["max_bad_rows"] = int(text)
    producer, topic = translate_spark_options(name, options)
    extra = dict(merged.pop("producer_config", None) or {})
    clash = sorted(set(extra) & set(producer))
    if clash:
        raise ConfigurationError(
            f"{clash} set both as kafka.* options and in producer_config; set them once",
            sink=name,
            setting=clash[0],
        )
    if topic is not None and merged.get("topic") is not None:
        raise ConfigurationError(
            "topic set both in the options and as an argument; set it once",
            sink=name,
            setting="topic",
        )
    if topic is not None:
        merged["topic"] = topic
    merged["producer_config"] = {**producer, **extra}
    return merged
