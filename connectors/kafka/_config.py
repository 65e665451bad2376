"""Producer configuration: defaults, enforced settings and validation.

The user's producer configuration (librdkafka property names) is passed
through, with three kinds of changes:

* **enforced** -- ``enable.idempotence=true`` and ``acks=all``: exactly-once
  needs both; an explicit contrary value is refused;
* **owned by the sink** -- ``transactional.id`` (one per sink identity and
  partition slot, from ``transactional_id_prefix``) and the delivery-report
  settings; setting them is refused;
* **defaults** -- :data:`PRODUCER_DEFAULTS`, tuned for throughput and for
  Java-compatible partitioning; any of them can be overridden.

Spark's own Kafka sink takes Java client properties (``kafka.*`` options);
:mod:`._spark_options` translates them into these properties first.

Secrets (:func:`is_secret`: ``sasl.password``, ``ssl.key.password``,
``*secret*``...) never leave the configuration in readable form: the
configurations the sink keeps are :class:`SecretConfig` mappings, whose
``repr`` masks them, and :func:`config_key` holds only keyed digests of them.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from typing import Any, TypeGuard

from twophase.errors import ConfigurationError

__all__ = [
    "CLIENT_KEY_PREFIXES",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "PRODUCER_DEFAULTS",
    "SecretConfig",
    "client_config",
    "config_key",
    "is_secret",
    "is_valid_topic_name",
    "normalise_producer_config",
    "validate_topic_name",
]

#: Short on purpose: a task that dies mid-transaction holds back
#: ``read_committed`` consumers of the partitions it wrote until the broker
#: aborts the transaction (or recovery fences it). A partition's whole write
#: must fit in it.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000

#: Defaults applied unless the user sets the key (see docs/kafka.md, "Tuning").
PRODUCER_DEFAULTS: Mapping[str, Any] = {
    # Java-compatible key hashing, so that keyed records land in the same
    # partition as with Spark's built-in Kafka sink (librdkafka's own default,
    # consistent_random, hashes differently).
    "partitioner": "murmur2_random",
    # A task produces its whole partition at once: wait a little longer than
    # librdkafka's 5 ms to fill larger batches (batch.size stays at librdkafka's
    # 1 MB default).
    "linger.ms": 20,
    # Cheap on the executor's CPU, and halves the bytes the brokers receive,
    # replicate and store for typical text/JSON values. Set "none" to turn it off.
    "compression.type": "lz4",
}

#: Settings exactly-once cannot do without; an explicit contrary value is refused.
_ENFORCED_TRUE = ("enable.idempotence",)
_ACKS_ALL = ("all", "-1", -1)

#: Settings the sink owns.
_OWNED = {
    "transactional.id": "the sink sets it per sink identity and partition slot; set "
    "transactional_id_prefix instead",
    "delivery.report.only.error": "the sink manages delivery reports itself",
    "on_delivery": "the sink manages delivery reports itself",
    "dr_cb": "the sink manages delivery reports itself",
    "dr_msg_cb": "the sink manages delivery reports itself",
}

#: Prefixes (and exact names) of the properties the admin client and the
#: control-topic consumer share with the producer: connection and security.
CLIENT_KEY_PREFIXES = (
    "bootstrap.servers",
    "client.id",
    "client.dns.lookup",
    "client.rack",
    "security.protocol",
    "sasl.",
    "ssl.",
    "ssl_",
    "enable.ssl.",
    "enable.sasl.",
    "https.",
    "socket.",
    "broker.",
    "api.version",
    "reconnect.",
    "retry.backoff",
    "connections.max.idle.ms",
    "metadata.",
    "topic.metadata.refresh",
    "receive.message.max.bytes",
    "plugin.library.paths",
    "debug",
    "log_level",
    "log.",
    "logger",
    "error_cb",
    "oauth_cb",
    "throttle_cb",
)

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

#: Property names whose values are secrets: every ``*password*``, ``*secret*``
#: and ``*passphrase*`` property (``sasl.password``, ``ssl.key.password``,
#: ``ssl.keystore.password``, ``sasl.oauthbearer.client.secret``...), private
#: keys given inline, the OAUTHBEARER configuration string and JAAS configs.
_SECRET_RE = re.compile(
    r"password|secret|passphrase|jaas|private\.key|^ssl\.key\.pem$|^ssl_key$|"
    r"^sasl\.oauthbearer\.config$",
    re.IGNORECASE,
)

#: Shown instead of a secret value.
MASK = "***"

#: Keys the digests of secrets in :func:`config_key`: random per process, so
#: that the digest of a weak password cannot be brute-forced offline.
_DIGEST_KEY = secrets.token_bytes(32)


def is_valid_topic_name(name: Any) -> TypeGuard[str]:
    """Tell whether ``name`` is a valid Kafka topic name.

    Parameters
    ----------
    name
        The name.

    Returns
    -------
    bool
        True for 1-249 characters from ``[A-Za-z0-9._-]`` other than ``.`` and ``..``.
    """
    return isinstance(name, str) and bool(_TOPIC_RE.match(name)) and name not in (".", "..")


def validate_topic_name(name: Any, setting: str, *, sink: str | None = None) -> str:
    """Check a Kafka topic name.

    Parameters
    ----------
    name
        The name.
    setting
        The sink option it came from (named in the error).
    sink
        The sink name (named in the error).

    Returns
    -------
    str
        The name.

    Raises
    ------
    ConfigurationError
        If it is not 1-249 characters from ``[A-Za-z0-9._-]`` or is ``.``/``..``.
    """
    if not is_valid_topic_name(name):
        raise ConfigurationError(
            f"{name!r} is not a valid Kafka topic name: use 1-249 characters from "
            "[A-Za-z0-9._-] (and not '.' or '..')",
            sink=sink,
            setting=setting,
        )
    return name


def is_secret(key: str) -> bool:
    """Tell whether a configuration property holds a secret (never shown).

    Parameters
    ----------
    key
        A librdkafka property name (or a Spark ``kafka.*`` option name).

    Returns
    -------
    bool
        True for passwords, secrets, passphrases, inline private keys, JAAS
        and OAUTHBEARER configuration strings.
    """
    return bool(_SECRET_RE.search(key))


class SecretConfig(dict[str, Any]):
    """A client configuration whose ``repr`` (and ``str``) masks the secrets.

    A plain ``dict`` otherwise: librdkafka gets the real values. Every
    configuration the sink keeps is one, so that printing the sink, its
    options or their ``__dict__`` never shows a password.
    """

    def __repr__(self) -> str:
        shown = (f"{k!r}: {MASK if is_secret(k) else repr(v)}" for k, v in self.items())
        return "{" + ", ".join(shown) + "}"


def _truthy(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    return None


#: What librdkafka says of a property it does not know, or of a value it refuses.
_UNKNOWN_PROPERTY = re.compile(r'No such configuration property: "([^"]+)"')
_BAD_VALUE = re.compile(r'Invalid value "[^"]*" for configuration property "([^"]+)"')


def check_properties(sink: str, conf: Mapping[str, Any]) -> None:
    """Refuse a property librdkafka does not know, or a value it refuses, when the sink is built.

    librdkafka itself is asked (a producer made and dropped, with no broker:
    nothing crosses the network). What it checks of properties together
    (SASL without a password...) still fails the task, as before; with
    ``plugin.library.paths`` nothing is checked (a plugin adds properties).

    Raises
    ------
    ConfigurationError
        Naming the property (``setting``), never quoting a value (it may be a secret).
    """
    from confluent_kafka import KafkaException, Producer

    if "plugin.library.paths" in conf:
        return
    probe = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    try:
        Producer({**probe, "log_level": 0})  # no warning that no broker is configured
    except KafkaException as exc:
        text = str(exc.args[0].str() if exc.args else exc)
        unknown, bad = _UNKNOWN_PROPERTY.search(text), _BAD_VALUE.search(text)
        if unknown is not None:
            raise ConfigurationError(
                f"producer_config has {unknown.group(1)!r}, a property librdkafka does not know "
                "(see librdkafka's CONFIGURATION.md for the producer's properties)",
                sink=sink,
                setting=unknown.group(1),
            ) from None
        if bad is not None:
            withheld = re.sub(r'value "[^"]*"', 'value "…"', text)
            raise ConfigurationError(
                f"librdkafka refuses the producer configuration: {withheld}",
                sink=sink,
                setting=bad.group(1),
            ) from None


def normalise_producer_config(
    sink: str,
    *,
    bootstrap_servers: str | None,
    producer_config: Mapping[str, Any] | None,
    transaction_timeout_ms: int | None,
) -> SecretConfig:
    """Validate the user's producer settings and apply enforced values and defaults.

    Runs wherever the sink is built (the driver); no network access.

    Parameters
    ----------
    sink
        The sink name (named in errors).
    bootstrap_servers
        Shortcut for ``producer_config["bootstrap.servers"]``.
    producer_config
        librdkafka producer properties.
    transaction_timeout_ms
        ``transaction.timeout.ms``; None takes the value in ``producer_config``
        or :data:`DEFAULT_TRANSACTION_TIMEOUT_MS`.

    Returns
    -------
    SecretConfig
        The producer configuration without ``transactional.id``.

    Raises
    ------
    ConfigurationError
        Naming the offending setting.
    """
    conf: dict[str, Any] = dict(producer_config or {})
    for key in conf:
        if not isinstance(key, str):
            raise ConfigurationError(
                f"producer_config keys must be strings, got {key!r}", sink=sink
            )
    if bootstrap_servers is not None:
        given = conf.get("bootstrap.servers")
        if given is not None and given != bootstrap_servers:
            raise ConfigurationError(
                f"bootstrap_servers={bootstrap_servers!r} disagrees with "
                f"producer_config['bootstrap.servers']={given!r}; set one of them",
                sink=sink,
                setting="bootstrap.servers",
            )
        conf["bootstrap.servers"] = bootstrap_servers
    if not conf.get("bootstrap.servers"):
        raise ConfigurationError(
            "no brokers configured: pass bootstrap_servers='host:9092,...' (or "
            "producer_config={'bootstrap.servers': ...})",
            sink=sink,
            setting="bootstrap.servers",
        )
    for key, why in _OWNED.items():
        if key in conf:
            raise ConfigurationError(f"{key} cannot be set: {why}", sink=sink, setting=key)
    for key in _ENFORCED_TRUE:
        if key in conf and _truthy(conf[key]) is not True:
            raise ConfigurationError(
                f"{key}={conf[key]!r} is refused: transactions, hence exactly-once, need "
                f"{key}=true (remove the setting)",
                sink=sink,
                setting=key,
            )
    for key in ("acks", "request.required.acks"):
        if key in conf and conf[key] not in _ACKS_ALL:
            raise ConfigurationError(
                f"{key}={conf[key]!r} is refused: exactly-once needs acks=all (a record "
                "acknowledged by one replica can be lost when that broker fails); remove the "
                "setting",
                sink=sink,
                setting=key,
            )
    in_conf = conf.pop("transaction.timeout.ms", None)
    if (
        in_conf is not None
        and transaction_timeout_ms is not None
        and int(in_conf) != int(transaction_timeout_ms)
    ):
        raise ConfigurationError(
            f"transaction_timeout_ms={transaction_timeout_ms} disagrees with "
            f"producer_config['transaction.timeout.ms']={in_conf!r}; set one of them",
            sink=sink,
            setting="transaction.timeout.ms",
        )
    timeout = transaction_timeout_ms if transaction_timeout_ms is not None else in_conf
    timeout = DEFAULT_TRANSACTION_TIMEOUT_MS if timeout is None else timeout
    try:
        timeout_ms = int(timeout)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"transaction.timeout.ms must be an integer number of milliseconds, got {timeout!r}",
            sink=sink,
            setting="transaction.timeout.ms",
        ) from None
    if timeout_ms < 1000:
        raise ConfigurationError(
            f"transaction.timeout.ms={timeout_ms} is too short: every partition of a batch "
            "must be written and committed within it; use at least 1000 (default 60000)",
            sink=sink,
            setting="transaction.timeout.ms",
        )
    check_properties(sink, conf)
    out = SecretConfig(PRODUCER_DEFAULTS)
    out.update(conf)
    out["enable.idempotence"] = True
    if "request.required.acks" not in out:
        out["acks"] = "all"
    out["transaction.timeout.ms"] = timeout_ms
    return out


def client_config(producer_conf: Mapping[str, Any]) -> SecretConfig:
    """Keep the connection and security settings of a producer configuration.

    The admin client and the control-topic consumer use them, so that they
    reach the same cluster with the same credentials without warnings about
    producer-only properties.

    Parameters
    ----------
    producer_conf
        A normalised producer configuration.

    Returns
    -------
    SecretConfig
        The shared subset (see :data:`CLIENT_KEY_PREFIXES`).
    """
    return SecretConfig(
        (key, value)
        for key, value in producer_conf.items()
        if any(key == p or key.startswith(p) for p in CLIENT_KEY_PREFIXES)
    )


def config_key(conf: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Build a hashable key of a configuration, for the producer pool.

    Callables (``error_cb``, ``oauth_cb``...) are keyed by their qualified
    name, so that a sink unpickled again on an executor finds its producers.
    Secrets (:func:`is_secret`) are keyed by a digest keyed with a random
    per-process key: two configurations differing only in a password differ,
    and the key never holds the password. The key is built once where the
    sink is built and travels with it.

    Parameters
    ----------
    conf
        The configuration.

    Returns
    -------
    tuple
        Sorted ``(key, text)`` pairs.
    """
    items = []
    for key, value in conf.items():
        if callable(value):
            text = f"<callable {getattr(value, '__module__', '?')}."
            text += f"{getattr(value, '__qualname__', type(value).__qualname__)}>"
        elif is_secret(key):
            digest = hashlib.blake2b(repr(value).encode(), key=_DIGEST_KEY, digest_size=16)
            text = f"<secret {digest.hexdigest()}>"
        else:
            text = repr(value)
        items.append((key, text))
    return tuple(sorted(items))
