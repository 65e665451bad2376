"""Tests on a real Spark standalone cluster (``twophase_dev.SparkCluster``): executors really lost.

A package (not only a test folder) because Spark's Python workers on the cluster import
:mod:`tests.cluster.probes` to unpickle the probed sinks; ``cluster_session(python_path=[root])``
puts the repository root on their ``PYTHONPATH``.
"""
