"""Connectors: exactly-once sinks for real targets, built on the twophase core.

Each connector lives in its own subpackage and depends on the core, never the
reverse: :mod:`twophase.connectors.kafka` (Apache Kafka through
confluent-kafka) and :mod:`twophase.connectors.jdbc` (PostgreSQL through
psycopg2, MariaDB through PyMySQL).
"""
