"""What the Spark examples share: their SparkSession, and the servers they run against.

Not an example itself: the examples import it as a sibling module (``import _spark``), so copy it
next to an example that you take elsewhere. It needs PySpark; only throwaway servers need the
checkout's development tools (``twophase_dev``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Options and settings that put jars on Spark's classpath.
_JAR_SETTINGS = {"--jars", "--packages", "spark.jars", "spark.jars.packages"}


def _spark_home() -> Path:
    """Return the Spark that ``python`` starts: ``$SPARK_HOME``, else PySpark's own."""
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def kafka_package() -> str:
    """Return the Maven coordinate of Spark's Kafka connector for the installed PySpark.

    ``pip install pyspark`` ships Spark without it. The connector must match PySpark's version
    and the Scala version of PySpark's jars (2.12 for PySpark 3.5, 2.13 from 4.0).

    Returns
    -------
    str
        ``org.apache.spark:spark-sql-kafka-0-10_<scala>:<PySpark version>``.
    """
    import pyspark

    scala = "2.12" if pyspark.__version__.startswith("3.") else "2.13"
    for jar in _spark_home().glob("jars/spark-core_*.jar"):  # e.g. spark-core_2.13-4.2.0.jar
        scala = jar.name.split("_")[1].split("-")[0]
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{pyspark.__version__}"


def _jars_configured() -> bool:
    """Whether ``$PYSPARK_SUBMIT_ARGS`` or ``spark-defaults.conf`` already names jars."""
    words = [w.split("=")[0] for w in shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))]
    conf_dir = os.environ.get("SPARK_CONF_DIR") or _spark_home() / "conf"
    defaults = Path(conf_dir, "spark-defaults.conf")
    if defaults.is_file():
        lines = defaults.read_text().splitlines()
        words += [re.split(r"[\s=:]", line.strip())[0] for line in lines]  # key, then its value
    return not _JAR_SETTINGS.isdisjoint(words)


def spark_session(
    app_name: str, *, kafka: bool, master: str = "local[*]", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """Return the application's SparkSession, with Spark's Kafka connector if ``kafka``.

    Run with ``python``, Spark starts in this process on ``master``, and the connector comes from
    Maven (``spark.jars.packages``; Spark's resolver looks in ``~/.m2`` first), unless
    ``$PYSPARK_SUBMIT_ARGS`` or ``spark-defaults.conf`` names jars already. Run with
    ``spark-submit``, on Spark Connect, or after the process made a session, the master and the
    jars are left as they were set (``--master``, ``--packages``).

    Parameters
    ----------
    app_name : str
        Spark application name.
    kafka : bool
        Whether the application reads or writes with Spark's Kafka source or sink.
    master : str, optional
        Master when Spark starts here; ``local[N,F]`` tries a failed task ``F`` times.
    conf : mapping of str to str, optional
        Settings of the application (each example says why it sets them).

    Returns
    -------
    pyspark.sql.SparkSession
        The session; stop it with ``spark.stop()``.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this interpreter
    if submitted or "SPARK_REMOTE" in os.environ or SparkSession.getActiveSession() is not None:
        return builder.getOrCreate()
    # Python workers run this interpreter, where twophase is installed, not the first python3
    # on PATH (Spark's default).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = builder.master(master)
    if kafka and not _jars_configured():
        builder = builder.config("spark.jars.packages", kafka_package())
    return builder.getOrCreate()


def require_dev_tools(needed_by: str, instead: str) -> None:
    """Exit, saying what to do, if the checkout's development tools (``twophase_dev``) are missing.

    Parameters
    ----------
    needed_by : str
        What needs them, e.g. ``"--dev"``.
    instead : str
        The options that name servers instead, e.g. ``"--bootstrap-servers"``.
    """
    if importlib.util.find_spec("twophase_dev") is None:
        sys.exit(
            f"{needed_by} needs the checkout's development tools: run from a checkout after "
            f"scripts/setup.sh, or pass {instead}"
        )


@contextlib.contextmanager
def servers(
    bootstrap: str | None, dsn: str | None, log_dir: Path | None = None
) -> Iterator[tuple[str, str]]:
    """Yield (Kafka bootstrap servers, PostgreSQL DSN): the given ones, else the checkout's.

    In the checkout, a server not given is the one ``$TWOPHASE_KAFKA_BOOTSTRAP`` /
    ``$TWOPHASE_PG_DSN`` names (``twophase-dev up``), else a throwaway one on a free loopback port
    (its log under ``log_dir``), stopped when the block ends.

    Parameters
    ----------
    bootstrap : str or None
        The broker of ``--bootstrap-servers``.
    dsn : str or None
        The PostgreSQL server of ``--dsn``.
    log_dir : pathlib.Path, optional
        Where throwaway servers keep their logs (a temporary directory by default).

    Yields
    ------
    tuple of str
        The bootstrap servers and the DSN.
    """
    if bootstrap and dsn:
        yield bootstrap, dsn
        return
    require_dev_tools(
        "a throwaway Kafka broker and PostgreSQL server", instead="--bootstrap-servers and --dsn"
    )
    from twophase_dev import ENV_KAFKA_BOOTSTRAP, ENV_PG_DSN, KafkaBroker, PostgresServer

    bootstrap = bootstrap or os.environ.get(ENV_KAFKA_BOOTSTRAP)
    dsn = dsn or os.environ.get(ENV_PG_DSN)
    with contextlib.ExitStack() as stack:
        if not bootstrap:
            broker = KafkaBroker(log_dir=log_dir / "kafka" if log_dir else None)
            bootstrap = stack.enter_context(broker).bootstrap_servers
        if not dsn:
            pg = PostgresServer(log_dir=log_dir / "postgres" if log_dir else None)
            dsn = stack.enter_context(pg).dsn
        yield bootstrap, dsn
