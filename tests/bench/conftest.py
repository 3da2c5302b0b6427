"""Shared fixtures for the benchmark-suite tests: one Spark JVM for the whole session.

``spark`` is a local[2] session; a test that needs another master (the cluster test) stops it and
builds its own in the same JVM, and the next test gets a fresh local[2] session cheaply.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark-logs")


@pytest.fixture(scope="session")
def _stop_spark_at_end():
    yield
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


@pytest.fixture
def spark(spark_log_dir: Path, _stop_spark_at_end):
    from bench.session import get_session

    session = get_session("local[2]", app_name="mqbench-tests", log_dir=spark_log_dir)
    if not session.sparkContext.master.startswith("local["):
        session.stop()
        session = get_session("local[2]", app_name="mqbench-tests", log_dir=spark_log_dir)
    return session
