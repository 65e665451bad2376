"""Randomised, seeded chaos trials of the real sinks under a real Spark driver.

See ``docs/chaos.md``.
"""
