"""The engine that runs a batch: the coordinator, the protocols' steps, the participants, recovery.

It sees a sink only through the hooks of :mod:`._hooks` and reaches Spark not at all: the Spark
glue (:mod:`twophase._spark`) drives it, and the sinks' base classes sit above both.
"""
