"""Start our broker as a subprocess on free loopback ports, measure its boot time and RSS, stop it.

``mqbench run`` without ``--namesrv`` uses this, and so do the tests of ``mqclient`` and ``bench``.
The boot line ``The broker[NAME, IP:PORT] boot success...`` on stdout marks readiness; the rest of
the broker's output goes to a log file in the run directory.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from broker.tools.embedded import free_port  # noqa: F401 - re-exported: bench scripts take it from here

# For tests and CI: the default commit-log file is preallocated at 1 GiB; 64 MiB keeps disks alive.
SMALL_STORE = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}

BOOT_LINE = re.compile(r"The broker\[(?P<name>[^,\]]*), (?P<addr>[^\]]+)\] boot success")


class BrokerStartError(RuntimeError):
    """The broker did not boot; the message quotes the end of its log."""


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGTERM when the process that started it dies (Linux), so a
    killed test run or a crashed ``mqbench`` never leaves a broker behind. (The signal follows the
    starting *thread*: start children from a thread that lives as long as they should.)"""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def rss_bytes(pid: int) -> int | None:
    """Resident set size from /proc (Linux); None where unavailable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


@dataclass
class BrokerProcess:
    """A broker subprocess. ``config`` are extra ``--set KEY=VALUE`` pairs."""

    store_dir: Path
    config: dict[str, str] = field(default_factory=dict)
    fault_injection: bool = True
    log_path: Path | None = None
    python: str = sys.executable
    listen_port: int = 0
    namesrv_port: int = 0
    grpc_port: int = 0  # the 5.x endpoint (plaintext), on a free port unless set
    repo_root: Path | None = None  # whose code runs (default: this checkout); A/B benches pass another
    proc: subprocess.Popen[bytes] | None = None
    broker_name: str = ""
    broker_addr: str = ""
    boot_seconds: float | None = None
    rss_at_boot: int | None = None
    rss_peak: int = 0
    _reader: threading.Thread | None = None
    _booted: threading.Event = field(default_factory=threading.Event)
    _sampler_stop: threading.Event = field(default_factory=threading.Event)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout_s: float = 60.0) -> BrokerProcess:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.listen_port = self.listen_port or free_port()
        self.namesrv_port = self.namesrv_port or free_port()
        self.grpc_port = self.grpc_port or free_port()
        log_path = self.log_path or (self.store_dir / "broker.log")
        self.log_path = log_path
        # A broker the benchmark starts for itself is reached over loopback only (brokerIP1 says so too).
        sets = {
            "listenPort": str(self.listen_port),
            "namesrvListenPort": str(self.namesrv_port),
            "storePathRootDir": str(self.store_dir),
            "brokerIP1": "127.0.0.1",
            "listenHost": "127.0.0.1",
            "namesrvListenHost": "127.0.0.1",
            "grpcServerPort": str(self.grpc_port),
            "grpcListenHost": "127.0.0.1",
            "grpcTlsEnable": "false",
        }
        if self.fault_injection:
            sets["faultInjectionEnable"] = "true"
        sets.update(self.config)
        cmd = [self.python, "-m", "broker.main"]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        env = dict(os.environ)
        root = str(self.repo_root or Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        logf = open(log_path, "ab")  # noqa: SIM115 - owned by the reader thread
        started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._reader = threading.Thread(target=self._read_output, args=(logf,), daemon=True, name="broker-output")
        self._reader.start()
        deadline = started + timeout_s
        while not self._booted.wait(0.05):
            if self.proc.poll() is not None:
                self._reader.join(2)
                raise BrokerStartError(
                    f"the broker exited with code {self.proc.returncode} before booting; "
                    f"log {log_path}:\n{_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerStartError(
                    f"the broker did not print its boot line within {timeout_s}s; log {log_path}:\n{_tail(log_path)}"
                )
        self.boot_seconds = time.monotonic() - started
        self.rss_at_boot = rss_bytes(self.proc.pid)
        self.rss_peak = self.rss_at_boot or 0
        threading.Thread(target=self._sample_rss, daemon=True, name="broker-rss").start()
        return self

    def _read_output(self, logf) -> None:  # type: ignore[no-untyped-def]
        assert self.proc is not None and self.proc.stdout is not None
        with logf:
            for raw in self.proc.stdout:
                logf.write(raw)
                if not self._booted.is_set():
                    m = BOOT_LINE.search(raw.decode("utf-8", errors="replace"))
                    if m:
                        self.broker_name = m.group("name")
                        self.broker_addr = m.group("addr")
                        logf.flush()
                        self._booted.set()

    def _sample_rss(self) -> None:
        while not self._sampler_stop.wait(0.5):
            if self.proc is None or self.proc.poll() is not None:
                return
            rss = rss_bytes(self.proc.pid)
            if rss:
                self.rss_peak = max(self.rss_peak, rss)

    def stop(self, grace_s: float = 10.0) -> int | None:
        self._sampler_stop.set()
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self._reader is not None:
            self._reader.join(2)
        return proc.returncode

    def info(self) -> dict[str, object]:
        return {
            "started_by_mqbench": True,
            "name": self.broker_name,
            "addr": self.broker_addr,
            "namesrv": self.namesrv,
            "boot_time_s": None if self.boot_seconds is None else round(self.boot_seconds, 3),
            "rss_at_boot_bytes": self.rss_at_boot,
            "rss_peak_bytes": self.rss_peak or None,
            "config": dict(self.config),
            "fault_injection": self.fault_injection,
        }

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
