"""A throwaway PostgreSQL server: binaries and OS user, data directory, the server, test helpers.

Runs on: the developer's or test session's machine, never on Spark executors.
"""
