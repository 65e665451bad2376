"""The engine that runs a batch: the coordinator, the protocols' steps, the participants, recovery.

It sees a sink only through the hooks of :mod:`._hooks` and reaches Spark not at all: the Spark
glue (:mod:`twophase._spark`) drives it, and the sinks' base classes sit above both.

The driver side is built by composition, one object per idea, with no base class among them:

- :class:`~._coordinator.Coordinator` (``_coordinator.py``), one per run of a query and sink,
  owns the run and does what both protocols do: claim the log, recover (``_recovery.py``, with
  ``_lost.py`` for a decided batch the target lost), skip a batch already committed, check the
  schema and route the rows; then it hands the batch to the sink's protocol.
- :class:`~._run.Run` (``_run.py``) is the run's shared state, frozen when the run starts: the
  log, the sink context, the retry sleep and the step listener, and the helpers every protocol
  step uses (announce a step, retry, plan the tasks, record "committed", the metrics). Each
  protocol object receives it explicitly.
- :class:`~._coordinated_protocol.CoordinatedProtocol` (``_coordinated_protocol.py``) reads as
  the coordinated protocol's state machine top to bottom: fence earlier runs, phase 1, decision,
  phase 2, sweep, fence, record committed. Its fencing loop (:class:`~._fencing_loop.FencingLoop`,
  ``_fencing_loop.py``) is a collaborator it builds over the same run.
- :class:`~._markers_protocol.MarkersProtocol` (``_markers_protocol.py``) is the markers
  protocol's: stage, check the replay against the markers (``_replay.py``), record the intent,
  phase 1, record committed.

Both protocol objects answer ``begin_run(sink)`` and ``run_batch(sink, execution, recovered)``.
The step names the listener hears -- the test kit's crash points, the chaos harness's and the
upgrade test's -- are defined once, in ``_steps.py``. The participant (``_participant.py``) runs
on the executors; :class:`~._runtime.SinkRuntime` (``_runtime.py``) keeps a sink's coordinator
and metrics between batches in the driver process.
"""
