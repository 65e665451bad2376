"""A throwaway Kafka broker: what it runs with, the broker itself, and its administration.

Runs on: the developer's or test session's machine, never on Spark executors.
"""
