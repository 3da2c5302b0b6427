"""A throw-away Spark standalone cluster (one master, one worker) on loopback, for tests and demos.

Runs the master and worker classes with pyspark's own ``spark-class``, so no Spark distribution
beyond the pip package is needed. A real cluster is started the usual way (``start-master.sh`` /
``start-worker.sh`` of a Spark distribution); ``mqbench run --master spark://HOST:7077`` is the same.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.broker_proc import die_with_parent, free_port


class ClusterStartError(RuntimeError):
    pass


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _wait_for(pattern: str, log: Path, proc: subprocess.Popen[bytes], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    rx = re.compile(pattern)
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if rx.search(text):
            return
        if proc.poll() is not None:
            raise ClusterStartError(f"the Spark {what} exited ({proc.returncode}); log {log}:\n{text[-3000:]}")
        time.sleep(0.2)
    raise ClusterStartError(f"the Spark {what} did not come up within {timeout_s}s; log {log}")


@dataclass
class LocalStandaloneCluster:
    work_dir: Path
    cores: int = 2
    memory: str = "1g"
    daemon_memory: str = "256m"
    port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 90.0) -> LocalStandaloneCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        home = spark_home()
        env = dict(
            os.environ,
            SPARK_HOME=str(home),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_NO_DAEMONIZE="1",
            SPARK_LOG_DIR=str(self.work_dir),
            SPARK_WORKER_DIR=str(self.work_dir / "worker"),
        )
        spark_class = str(home / "bin" / "spark-class")
        master_log = self.work_dir / "master.log"
        worker_log = self.work_dir / "worker.log"
        try:
            with open(master_log, "wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        [
                            spark_class,
                            "org.apache.spark.deploy.master.Master",
                            "--host",
                            "127.0.0.1",
                            "--port",
                            str(self.port),
                            "--webui-port",
                            str(free_port()),
                        ],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                        preexec_fn=die_with_parent,
                    )
                )
            _wait_for(
                r"Starting Spark master|I have been elected leader", master_log, self.procs[0], timeout_s, "master"
            )
            with open(worker_log, "wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        [
                            spark_class,
                            "org.apache.spark.deploy.worker.Worker",
                            "--host",
                            "127.0.0.1",
                            "--cores",
                            str(self.cores),
                            "--memory",
                            self.memory,
                            "--webui-port",
                            str(free_port()),
                            "--work-dir",
                            str(self.work_dir / "worker"),
                            self.master_url,
                        ],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                        preexec_fn=die_with_parent,
                    )
                )
            _wait_for(r"Successfully registered with master", worker_log, self.procs[1], timeout_s, "worker")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs.clear()

    def __enter__(self) -> LocalStandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
