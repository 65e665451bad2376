"""What the machine gives every local service: ports, the /proc reader, processes, files, waiting.

Nothing here knows a product (Kafka, PostgreSQL, Spark...); the services are built on it.
Runs on: the developer's or test session's machine, never on Spark executors.
"""
