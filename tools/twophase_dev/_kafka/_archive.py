"""Making the Kafka broker's class-data archive by one representative broker life.

Every broker the dev tools start (:class:`~twophase_dev.KafkaBroker`, a
:class:`~twophase_dev.KafkaCluster`'s members, secured brokers, brokers in network namespaces)
and its storage tool map the archive once it exists (``_install.kafka_jvm_options``). It is made
here, by ``scripts/setup.sh``: a throwaway broker whose JVM dumps the classes it loaded when it
exits, after it has done what the tests make brokers do -- start, create a topic, serve a
transactional producer and a ``read_committed`` consumer group -- and shut down cleanly.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from twophase_dev._errors import DevInfraError
from twophase_dev._jvm import make_class_archive
from twophase_dev._kafka._broker import KafkaBroker
from twophase_dev._kafka._install import KAFKA_VERSION, kafka_class_archive, kafka_classpath

__all__ = ["build_kafka_class_archive"]

_TOPIC = "class-archive"
_RECORDS = 20


class _ArchivingBroker(KafkaBroker):
    """A broker whose JVM (not its storage tool's) runs with the archive-dumping options."""

    dump_options = ""

    def _jvm_options(self, classpath: list[Path], main: str) -> str:
        return self.dump_options if main == "kafka.Kafka" else super()._jvm_options(classpath, main)


def _transaction(bootstrap: str) -> None:
    """Commit one transaction of records to :data:`_TOPIC` and read them back committed."""
    from confluent_kafka import Consumer, Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "class-archive", "log_level": 0}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(_RECORDS):
        producer.produce(_TOPIC, key=str(i).encode(), value=b"v" * 100)
    producer.commit_transaction(60)
    del producer
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "class-archive",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.subscribe([_TOPIC])
        read, deadline = 0, time.monotonic() + 60
        while read < _RECORDS and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                read += 1
        if read < _RECORDS:
            raise DevInfraError(f"the archiving broker served {read} of {_RECORDS} records")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _run_broker(options: str, version: str) -> None:
    broker = _ArchivingBroker(version=version)
    broker.dump_options = options
    try:
        broker.start()
        broker.create_topic(_TOPIC, partitions=2)
        _transaction(broker.bootstrap_servers)
        # A clean exit dumps the archive; a SIGKILL in the middle would leave half of one, so
        # the broker gets all the time it needs.
        process = broker._process
        assert process is not None
        process.signal(signal.SIGTERM)
        if not process.wait(300):
            raise DevInfraError("the archiving broker did not shut down in 300 s")
    finally:
        broker.stop()


def build_kafka_class_archive(
    version: str = KAFKA_VERSION, *, force: bool = False
) -> tuple[Path, float] | None:
    """Make the class-data archive of this Java and this Kafka's broker, unless it is there.

    Parameters
    ----------
    version : str, optional
        Kafka version, :data:`~twophase_dev.KAFKA_VERSION` by default (a broker of another
        version maps its own archive, if made).
    force : bool, optional
        Make it anew over an existing one.

    Returns
    -------
    tuple of (pathlib.Path, float) or None
        As ``make_class_archive``: where it is and how long it took (0 s when it was there
        already); ``None`` without ``java``.

    Raises
    ------
    DevInfraError
        If the archiving broker failed (the message has its log's end) or left no archive.
    """
    archive = kafka_class_archive(kafka_classpath(version))
    return make_class_archive(
        archive, "the Kafka broker", lambda options: _run_broker(options, version), force=force
    )
