"""Spark's Kafka sink options (``kafka.*`` Java properties) translated into librdkafka settings.

Spark's own Kafka sink takes Java client properties (``kafka.*`` options);
:func:`translate_spark_options` maps them, with a precise error for the few
Java-only ones, and turns a PLAIN or SCRAM JAAS configuration into
``sasl.username`` and ``sasl.password``. What comes out is then checked like
any producer configuration (:mod:`._config`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from twophase.errors import ConfigurationError

__all__ = ["translate_spark_options"]

#: Java client properties librdkafka does not know, with what to do instead.
_JAVA_ONLY = {
    "key.serializer": "twophase writes the key and value columns as bytes (string or binary "
    "columns); remove the option",
    "value.serializer": "twophase writes the key and value columns as bytes (string or binary "
    "columns); remove the option",
    "ssl.truststore.location": "librdkafka reads PEM CA certificates: set ssl.ca.location "
    "(export the JKS truststore with `keytool -exportcert -rfc`)",
    "ssl.truststore.password": "librdkafka reads PEM CA certificates: set ssl.ca.location",
    "ssl.truststore.type": "librdkafka reads PEM CA certificates: set ssl.ca.location",
    "ssl.keystore.type": "librdkafka reads PKCS#12 keystores (ssl.keystore.location, "
    "ssl.keystore.password) or PEM files (ssl.certificate.location, ssl.key.location); "
    "remove ssl.keystore.type",
    "buffer.memory": "set queue.buffering.max.kbytes instead",
    "max.request.size": "set message.max.bytes instead",
    "max.block.ms": "not applicable: the sink waits for the local queue to drain",
    "interceptor.classes": "Java interceptors cannot run in librdkafka; remove the option",
    "partitioner.class": "set partitioner (murmur2_random is the Java-compatible default)",
    "metric.reporters": "Java metric reporters cannot run in librdkafka; use stats_cb",
    "sasl.login.callback.handler.class": "use oauth_cb or sasl.oauthbearer.* settings",
    "sasl.client.callback.handler.class": "use oauth_cb or sasl.oauthbearer.* settings",
}

_JAAS_RE = re.compile(
    r"^\s*org\.apache\.kafka\.common\.security\.(?:plain\.PlainLoginModule|"
    r"scram\.ScramLoginModule)\s+required\s+(?P<opts>.*?);?\s*$",
    re.DOTALL,
)
_JAAS_OPT_RE = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', re.DOTALL)
_JAAS_ESCAPE_RE = re.compile(r"\\(.)", re.DOTALL)


def _translate_jaas(sink: str, value: str) -> dict[str, str]:
    match = _JAAS_RE.match(value)
    if match is None:
        raise ConfigurationError(
            "kafka.sasl.jaas.config: only the PLAIN and SCRAM login modules can be translated "
            "to librdkafka (sasl.username / sasl.password); for OAUTHBEARER set "
            "sasl.oauthbearer.* (or oauth_cb), for GSSAPI set sasl.kerberos.*",
            sink=sink,
            setting="kafka.sasl.jaas.config",
        )
    # JAAS quoting: a backslash escapes the next character (\" and \\); the
    # rest of the value, non-ASCII included, is taken as it is.
    opts = {k: _JAAS_ESCAPE_RE.sub(r"\1", v) for k, v in _JAAS_OPT_RE.findall(match["opts"])}
    if "username" not in opts or "password" not in opts:
        raise ConfigurationError(
            'kafka.sasl.jaas.config: expected username="..." password="..."',
            sink=sink,
            setting="kafka.sasl.jaas.config",
        )
    return {"sasl.username": opts["username"], "sasl.password": opts["password"]}


def translate_spark_options(
    sink: str, options: Mapping[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """Translate the options of Spark's Kafka sink into producer settings.

    Parameters
    ----------
    sink
        The sink name (named in errors).
    options
        What was passed to ``df.writeStream.format("kafka").option(...)``:
        ``kafka.*`` Java producer properties and ``topic``.

    Returns
    -------
    tuple of (dict, str or None)
        The librdkafka producer configuration and the default topic.

    Raises
    ------
    ConfigurationError
        For an option twophase cannot honour, naming it and what to use
        instead.
    """
    producer: dict[str, Any] = {}
    topic: str | None = None
    for key, value in options.items():
        if key == "topic":
            topic = value
            continue
        if not key.startswith("kafka."):
            raise ConfigurationError(
                f"unknown Kafka sink option {key!r}: only 'topic' and 'kafka.*' producer "
                "properties are sink options (checkpointLocation, trigger and outputMode go "
                "on writeStream, as before)",
                sink=sink,
                setting=key,
            )
        name = key[len("kafka.") :]
        if name in _JAVA_ONLY:
            raise ConfigurationError(
                f"{key} is a Java client setting: {_JAVA_ONLY[name]}", sink=sink, setting=key
            )
        if name == "sasl.jaas.config":
            producer.update(_translate_jaas(sink, str(value)))
            continue
        producer[name] = value
    return producer, topic
