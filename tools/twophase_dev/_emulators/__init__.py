"""Cloud-storage emulators (fake-gcs-server, Azurite): installing them, and running them.

Runs on: the developer's or test session's machine, never on Spark executors.
"""
