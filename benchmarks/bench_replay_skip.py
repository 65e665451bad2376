"""Issue 53's measurements (docs/chaos.md): Spark's PROXY_ERROR, and what a skip costs.

Run: ``.venv/bin/python benchmarks/bench_replay_skip.py``. Part 1 matches Spark's own
``StreamExecution.PROXY_ERROR`` against messages of growing length on a new Java thread of the
default stack size (a Python ``Runnable`` through py4j). Part 2 times, inside ``foreachBatch``, the
check of the checkpoint (``holds_state``), ``noop`` and ``count()`` on stateful and stateless
batches.
"""

import statistics
import tempfile
import time
from typing import ClassVar

from pyspark.java_gateway import ensure_callback_server_started

from twophase._pyspark import stopped_batch_message
from twophase._spark._classic import SparkBatchExecution
from twophase_dev import spark_session

spark = spark_session("m53", master="local[2]")
jvm = spark.sparkContext._jvm
ensure_callback_server_started(spark.sparkContext._gateway)
# --- 1. PROXY_ERROR on a thread of Java's default stack size
try:
    se = getattr(jvm, "org.apache.spark.sql.execution.streaming.runtime.StreamExecution")
    regex = se.PROXY_ERROR()
except Exception:
    se = getattr(jvm, "org.apache.spark.sql.execution.streaming.StreamExecution")
    regex = se.PROXY_ERROR()
results = {}


class Probe:
    def __init__(self, text):
        self.text = text

    def run(self):
        try:
            results[len(self.text)] = str(regex.findFirstIn(self.text).isDefined())
        except Exception as exc:
            results[len(self.text)] = type(exc).__name__ + ":" + str(exc)[:80]

    class Java:
        implements: ClassVar[list[str]] = ["java.lang.Runnable"]


head = "Traceback ...\npy4j.protocol.Py4JJavaError: An error occurred while calling o1.collect.\n: "
for n in (200, 1000, 2000, 4000, 8000, 16000, 32000):
    text = (
        head
        + ("\tat org.apache.spark.Foo.bar(Foo.scala:1)\n" * (n // 40))[:n]
        + "java.lang.InterruptedException"
    )
    t = jvm.java.lang.Thread(Probe(text))
    t.start()
    t.join()
    print("PROXY_ERROR on", len(text), "chars:", results.get(len(text)), flush=True)
msg = stopped_batch_message("a-sink-name", 123)
print("stopped_batch_message", len(msg), "chars, matches:", regex.findFirstIn(msg).isDefined())

# --- 2. cost of a skipped stateful batch
d = tempfile.mkdtemp()
for b in range(6):
    spark.range(b * 20000, (b + 1) * 20000).selectExpr(
        "id", "concat('p', id) AS payload"
    ).write.parquet(f"{d}/in/b{b}")
src = (
    spark.readStream.schema("id long, payload string")
    .option("maxFilesPerTrigger", 1)
    .parquet(f"{d}/in/*")
)
times = {"noop": [], "count": [], "holds_state": []}


def fb(df, batch_id):
    ex = SparkBatchExecution(df, batch_id)
    t = time.perf_counter()
    s = ex.holds_state()
    times["holds_state"].append(time.perf_counter() - t)
    assert s == STATEFUL, s
    if batch_id == 0:
        df.write.format("noop").mode("overwrite").save()
        return
    for kind in ("noop", "count"):
        t = time.perf_counter()
        if kind == "noop":
            ex.compute_without_writing()
        else:
            df.count()
        times[kind].append(time.perf_counter() - t)


for STATEFUL in (True, False):
    for k in times:
        times[k].clear()
    s2 = src.groupBy((src.id % 1000).alias("k")).count() if STATEFUL else src
    q = (
        s2.writeStream.foreachBatch(fb)
        .outputMode("update" if STATEFUL else "append")
        .option("checkpointLocation", f"{d}/chk{STATEFUL}")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    print(
        "stateful" if STATEFUL else "stateless",
        {
            k: f"median {statistics.median(v) * 1000:.1f} ms (n={len(v)})"
            for k, v in times.items()
            if v
        },
        flush=True,
    )
