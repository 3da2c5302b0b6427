"""Build the SparkSession for mqbench jobs: right Python, loopback by default, Spark's own logs kept quiet.

Spark's JVM inherits the driver's stderr when it is launched; we point file descriptor 2 at
``<out>/spark.log`` for that moment, so every JVM and Python-worker log line lands in that file and
the terminal only shows mqbench's own progress. Errors still surface as Python exceptions.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
"""


def prepare_environment() -> None:
    """Environment every mqbench Spark process needs; idempotent, never overrides the user's choice."""
    # Workers must run the interpreter that has our packages (the venv), not whatever `python3` is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Loopback unless told otherwise: the machine may have no routable interface, and a laptop run
    # should not listen on the LAN.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers import `bench` and `mqclient` from the checkout when they are not installed.
    root = str(Path(__file__).resolve().parent.parent)
    pp = os.environ.get("PYTHONPATH", "")
    if root not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = root + (os.pathsep + pp if pp else "")


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    with open(path, "ab") as logf:
        saved = os.dup(2)
        try:
            os.dup2(logf.fileno(), 2)
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def get_session(
    master: str = "local[*]",
    *,
    app_name: str = "mqbench",
    log_dir: Path | None = None,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession for ``master``; reuses the active one when it already runs (tests share one)."""
    prepare_environment()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    log_dir = log_dir or Path.cwd()
    log_dir.mkdir(parents=True, exist_ok=True)
    log4j = log_dir / "log4j2-mqbench.properties"
    log4j.write_text(_LOG4J2, encoding="utf-8")
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j.resolve()}"
    if master.startswith("local"):
        # A local run's JVM lives for one short job: the C1 compiler alone warms up several times
        # faster, which is most of the first query's cost on a small machine.
        java_opts += " -XX:TieredStopAtLevel=1"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        # Outcome tables are small next to what Spark is built for: few shuffle partitions
        # keep the scoring job's many small stages cheap on a laptop.
        .config("spark.sql.shuffle.partitions", "2" if master.startswith("local") else "16")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.executorEnv.SPARK_LOCAL_IP", os.environ["SPARK_LOCAL_IP"])
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    )
    if os.environ["SPARK_LOCAL_IP"].startswith("127."):
        builder = builder.config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        builder = builder.config("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"])
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    with _stderr_to(log_dir / "spark.log"):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not (master == "local" or master.startswith("local[")):
        ship_code(spark, log_dir)
    return spark


def ship_code(spark: SparkSession, work_dir: Path) -> Path:
    """Send our packages to the executors (``addPyFile``), so cluster workers need only the
    third-party dependencies installed, not this checkout."""
    import zipfile

    root = Path(__file__).resolve().parent.parent
    path = work_dir / "mqbench-code.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        # (store: mqclient takes String.hashCode from store/java_hash.py; numpy and structlog are core deps)
        for package in ("bench", "mqclient", "remoting", "store"):
            for f in sorted((root / package).rglob("*.py")):
                zf.write(f, f.relative_to(root).as_posix())
    spark.sparkContext.addPyFile(str(path))
    return path
