"""Build the SparkSession for mqbench jobs: right Python, loopback by default, Spark's own logs kept quiet.

Spark's JVM inherits the driver's stderr when it is launched; we point file descriptor 2 at
``<out>/spark.log`` for that moment, so every JVM and Python-worker log line lands in that file and
the terminal only shows mqbench's own progress. Errors still surface as Python exceptions.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import structlog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
_log = structlog.get_logger("mqbench.session")

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


class SparkLaunchError(RuntimeError):
    """Spark's JVM would not start; the message carries the end of its log, which says why."""


#: Times a JVM that dies before it hands PySpark its gateway port is started again.
LAUNCH_ATTEMPTS = 3
_LOG_TAIL_LINES = 20


def launch(start: Callable[[], T], log_path: Path, *, attempts: int = LAUNCH_ATTEMPTS, pause_s: float = 1.0) -> T:
    """Run ``start`` (a builder's ``getOrCreate``) with the JVM's stderr in ``log_path``, again if the JVM
    exited before it answered.

    The JVM has been seen to die at birth once in an otherwise green CI run, and the next launch, seconds
    later, started fine: a JVM start can lose a race with the machine (memory, a port, a temp directory)
    that the same command wins a moment later. One such race is known: PySpark forks its launcher with a
    ``preexec_fn``, and in a process where gRPC's fork handlers are live and busy the forked child can abort
    before exec (``broker.testing.process.child_preexec``); the suite and the gRPC driver turn them off. Any other error is raised at once. When every attempt
    fails, the error quotes the end of ``log_path``, where the JVM wrote why, since PySpark itself only
    says that the gateway exited.
    """
    for attempt in range(1, attempts + 1):
        try:
            with _stderr_to(log_path):
                return start()
        except Exception as exc:
            if "JAVA_GATEWAY_EXITED" not in str(exc):
                raise
            _log.warning("spark JVM exited at start", attempt=attempt, attempts=attempts, log=str(log_path))
            if attempt < attempts:
                time.sleep(pause_s)
    raise SparkLaunchError(
        f"Spark's JVM exited before it started ({attempts} attempts); the end of {log_path}:\n"
        + _tail(log_path, _LOG_TAIL_LINES)
    )


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


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
    spark = launch(builder.getOrCreate, log_dir / "spark.log")
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
