"""A throwaway MariaDB server: its binaries, its work directory files, the server, a test client.

Runs on: the developer's or test session's machine, never on Spark executors.
"""
