"""Exactly-once into Apache Kafka: :class:`KafkaSink`, through confluent-kafka.

One Kafka transaction per partition of a micro-batch, committed on the
executor together with an idempotence marker in a compacted control topic
(the markers protocol). Takes the columns of Spark's own Kafka sink, so that
switching from ``format("kafka")`` is a one-line change::

    from twophase.connectors.kafka import KafkaSink

    sink = KafkaSink("events", bootstrap_servers="broker:9092", topic="events")
    df.writeStream.foreachBatch(sink).option("checkpointLocation", "/chk/events").start()

Layout: the sink, a thin router over the hooks, in ``_sink.py``; its validated settings
in ``_options.py``, the producer settings in ``_config.py`` and Spark's ``kafka.*``
options translated in ``_spark_options.py``; one partition's transaction (produce,
probe, flush, commit, abort) in ``_transaction.py``, and how its failures are raised in
``_transaction_failures.py``; the fencing of earlier producers of a slot in
``_fencing.py``, with the lane a worker claims in ``_lanes.py`` and the fence records of
other lanes in ``_attempt_fence.py``; the per-worker producer pool in ``_pool.py`` and
the clients a process keeps in ``_clients.py``; the columns a batch must have in
``_columns.py`` and Arrow rows to records in ``_records.py``; the up-front check of the
topics a ``topic`` column names in ``_topics.py``; with ``bad_rows="dead_letter"``, the
rows the brokers would refuse found before producing in ``_row_errors.py``, the
dead-letter records in ``_dead_letters.py`` and their redrive in ``_redrive.py``; the
marker format in ``_markers.py`` and its fast reader in ``_marker_reader.py``; the
driver-side cluster checks in ``_checks.py``, after a first contact with the brokers in
``_contact.py``; the mapping of Kafka errors onto :mod:`twophase.errors` in
``_errors.py``. No module imports one of a layer above it (the ``kafka-layers`` contract
in ``pyproject.toml``). See ``docs/kafka.md``.
"""

from ._clients import close_clients
from ._options import KafkaOptions
from ._sink import KafkaSink
from ._transaction import KafkaTransaction

__all__ = ["KafkaOptions", "KafkaSink", "KafkaTransaction", "close_clients"]
