"""The quick start's two snippets, in a fresh virtualenv with the wheel: no checkout, no dev tools.

Usage: ``python quickstart_check.py DSN BOOTSTRAP WORK_DIR`` with that virtualenv's python
(``scripts/wheel_check.sh`` builds it). Writes 1,000 orders with ``postgres_sink(mode="upsert")``
and with ``KafkaSink`` through ``twophase.write_stream``, then counts them; exits 1 unless each
target holds each order exactly once.
"""

import sys
import uuid
from collections import Counter
from pathlib import Path

import psycopg2
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

import twophase
from twophase.connectors.jdbc import postgres_sink
from twophase.connectors.kafka import KafkaSink

dsn, bootstrap, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
n = 1000
src = work / "in"
src.mkdir(parents=True)
for part in range(4):
    ids = list(range(part * n // 4, (part + 1) * n // 4))
    pq.write_table(
        pa.table({"order_id": pa.array(ids, pa.int64()), "status": ["new"] * len(ids)}),
        src / f"p{part}.parquet",
    )
table = f"orders_{uuid.uuid4().hex[:6]}"
with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
    cur.execute(f"CREATE TABLE public.{table} (order_id bigint PRIMARY KEY, status text)")
topic = f"events-out-{uuid.uuid4().hex[:6]}"
admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(topic, 3)])[topic].result(30)

spark = SparkSession.builder.master("local[2]").appName("qs").getOrCreate()
orders = (
    spark.readStream.schema("order_id long, status string")
    .option("maxFilesPerTrigger", 1)
    .parquet(str(src))
)
sink = postgres_sink(
    "orders", table=f"public.{table}", dsn=dsn, mode="upsert", key_columns=["order_id"]
)
query = twophase.write_stream(
    orders, sink, checkpoint_location=str(work / "chk-orders"), trigger={"availableNow": True}
).start()
twophase.await_termination(query)
events = orders.selectExpr("CAST(order_id AS STRING) AS key", "status AS value")
ksink = KafkaSink("events", bootstrap_servers=bootstrap, topic=topic)
query = twophase.write_stream(
    events, ksink, checkpoint_location=str(work / "chk-events"), trigger={"availableNow": True}
).start()
twophase.await_termination(query)
spark.stop()

with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
    cur.execute(f"SELECT count(*), count(DISTINCT order_id) FROM public.{table}")
    print("postgres rows, distinct:", cur.fetchone())
c = Consumer(
    {
        "bootstrap.servers": bootstrap,
        "group.id": uuid.uuid4().hex,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
)
c.assign([TopicPartition(topic, p, 0) for p in range(3)])
keys, eof = Counter(), set()
while len(eof) < 3:
    m = c.poll(5)
    if m is None:
        break
    if m.error():
        eof.add(m.partition())
        continue
    keys[m.key()] += 1
print("kafka records, distinct, max copies:", sum(keys.values()), len(keys), max(keys.values()))
print(
    "pyspark",
    __import__("pyspark").__version__,
    "python",
    sys.version.split()[0],
    "twophase",
    twophase.__version__,
    twophase.__file__,
)
exact = sum(keys.values()) == len(keys) == n
with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
    cur.execute(f"SELECT count(*), count(DISTINCT order_id) FROM public.{table}")
    exact = exact and cur.fetchone() == (n, n)
print("OK: exactly once in both" if exact else "FAILED: not exactly once")
sys.exit(0 if exact else 1)
