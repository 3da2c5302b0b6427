"""A throw-away Spark standalone cluster (one master, one worker) on loopback, for tests and demos.

Runs the master and worker classes with pyspark's own ``spark-class``, so no Spark distribution
beyond the pip package is needed. A real cluster is started the usual way (``start-master.sh`` /
``start-worker.sh`` of a Spark distribution); ``mqbench run --master spark://HOST:7077`` is the same.
Each daemon is a ``broker.testing.process.ChildProcess`` (log file, ready line, stopped with its process group).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from broker.testing.ports import free_port
from broker.testing.process import ChildError, ChildProcess


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class LocalStandaloneCluster:
    work_dir: Path
    cores: int = 2
    memory: str = "1g"
    daemon_memory: str = "256m"
    port: int = 0
    procs: list[ChildProcess] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 90.0) -> LocalStandaloneCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        home = spark_home()
        env = dict(
            SPARK_HOME=str(home),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_NO_DAEMONIZE="1",
            SPARK_LOG_DIR=str(self.work_dir),
            SPARK_WORKER_DIR=str(self.work_dir / "worker"),
        )
        spark_class = str(home / "bin" / "spark-class")
        master = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master += ["--port", str(self.port), "--webui-port", str(free_port())]
        worker = [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
        worker += ["--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(free_port())]
        worker += ["--work-dir", str(self.work_dir / "worker"), self.master_url]
        daemons = (
            ("master", master, r"Starting Spark master|I have been elected leader"),
            ("worker", worker, r"Successfully registered with master"),
        )
        try:
            for name, argv, ready in daemons:
                # spark-class execs a JVM that may fork: signals go to the whole process group
                daemon = ChildProcess(
                    argv=argv,
                    env=env,
                    log_path=self.work_dir / f"{name}.log",
                    ready_line=re.compile(ready),
                    start_timeout_s=timeout_s,
                    process_group=True,
                )
                self.procs.append(daemon)
                daemon.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for daemon in reversed(self.procs):
            try:
                daemon.stop()
            except ChildError:
                pass  # still running after SIGTERM: it was killed
        self.procs.clear()

    def __enter__(self) -> LocalStandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
