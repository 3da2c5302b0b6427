"""Apache RocketMQ 4.9.7 (``rmq-anchor``) as a benchmark target beside our broker: free loopback ports, the
broker's pid for CPU figures, started and stopped like ``bench.broker_proc.BrokerProcess``."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from bench.broker_proc import free_port


@dataclass
class JavaBroker:
    bin_dir: Path  # the folder with rmq-anchor and rmqjava
    ns_port: int = field(default_factory=free_port)
    broker_port: int = field(default_factory=free_port)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def pid(self) -> int:
        """The broker JVM's pid (the name server idles during a benchmark)."""
        return int((self.bin_dir.parent / "logs" / "run" / "broker.pid").read_text())

    def _anchor(self, verb: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, RMQ_NS_PORT=str(self.ns_port), RMQ_BROKER_PORT=str(self.broker_port))
        return subprocess.run(
            [str(self.bin_dir / "rmq-anchor"), verb], env=env, capture_output=True, text=True, timeout=timeout_s
        )

    def start(self) -> Self:
        up = self._anchor("start", 240)
        if up.returncode != 0:
            self._anchor("stop", 120)  # a JVM that was only slow boots later: never leave it running
            raise RuntimeError(f"rmq-anchor start failed: {up.stdout.strip()} {up.stderr.strip()}")
        return self

    def stop(self) -> None:
        self._anchor("stop", 120)
