"""Shared fixtures for the benchmark-suite tests: one local[2] SparkSession for the whole session."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from bench.session import get_session

    log_dir: Path = tmp_path_factory.mktemp("spark-logs")
    session = get_session("local[2]", app_name="mqbench-tests", log_dir=log_dir)
    yield session
    session.stop()
