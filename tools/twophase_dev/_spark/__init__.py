"""Spark on this machine: its extra jars, a local session, a standalone cluster, a Connect server.

The cluster (:mod:`._cluster`, its daemons in :mod:`._daemons`, its processes told apart in
:mod:`._processes`, the client session's settings in :mod:`._cluster_session`) and the Connect
server (:mod:`._connect`) run the installed PySpark's own Spark; nothing is downloaded but the
jars of :mod:`._jars`.

Runs on: the developer's or test session's machine (the Spark driver's).
"""
