"""Starting Spark's JVM: a JVM that dies at birth is started again, and when it keeps dying the error says why.

PySpark only reports ``[JAVA_GATEWAY_EXITED]``; the reason is what the JVM printed on its stderr, which
``bench.session`` keeps in ``spark.log``. One green CI run lost its first Spark test to a JVM that exited at
start while the next launch, seconds later, worked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.errors import PySparkRuntimeError

from bench.session import SparkLaunchError, launch

ROOT = Path(__file__).resolve().parents[2]


def _gateway_exited() -> PySparkRuntimeError:
    return PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})


def test_a_jvm_that_dies_at_start_is_started_again(tmp_path):
    calls = []

    def start():
        calls.append(1)
        if len(calls) == 1:
            raise _gateway_exited()
        return "session"

    assert launch(start, tmp_path / "spark.log", pause_s=0) == "session"
    assert len(calls) == 2


def test_when_every_start_fails_the_error_quotes_the_jvm_log(tmp_path):
    calls = []

    def start():
        calls.append(1)
        # What the JVM prints lands on file descriptor 2, which launch() points at the log.
        os.write(2, f"Error occurred during initialization of VM, try {len(calls)}\n".encode())
        raise _gateway_exited()

    with pytest.raises(SparkLaunchError) as info:
        launch(start, tmp_path / "spark.log", attempts=3, pause_s=0)
    assert len(calls) == 3
    message = str(info.value)
    assert "3 attempts" in message
    assert "Error occurred during initialization of VM, try 3" in message


def test_other_errors_are_not_retried(tmp_path):
    calls = []

    def start():
        calls.append(1)
        raise ValueError("spark.sql.shuffle.partitions must be a number")

    with pytest.raises(ValueError, match="must be a number"):
        launch(start, tmp_path / "spark.log", pause_s=0)
    assert len(calls) == 1


def test_mqbench_score_without_a_java_says_why_and_exits_1(tmp_path):
    """A real launch: spark-submit with a JAVA_HOME that holds no java; one clear line set, no traceback."""
    run_dir = tmp_path / "run"
    (run_dir / "outcomes").mkdir(parents=True)
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-java"), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from bench.cli import main; sys.exit(main(sys.argv[1:]))",
            "score",
            str(run_dir),
            "--master",
            "local[1]",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Spark's JVM exited before it started" in proc.stderr
    assert "no-java" in proc.stderr  # spark-class names the java it could not run
    assert "Traceback" not in proc.stderr
