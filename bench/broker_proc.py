"""The broker a benchmark starts for itself: the test launcher's subprocess, plus its boot time and RSS figures.

``mqbench run`` without ``--namesrv`` uses this, and so do the tests of ``mqclient`` and ``bench``. Starting,
waiting for the boot line and stopping are ``broker.testing.process.BrokerProcess``'s; a benchmark's broker
adds fault injection (on unless asked otherwise), the 5.x endpoint in plaintext on a free port, a log in its
store directory, and a sampler of its resident memory for ``info()``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Self

from broker.testing import process
from broker.testing.ports import free_port  # noqa: F401 - re-exported: bench scripts take it from here
from broker.testing.process import ChildError

# For tests and CI: the default commit-log file is preallocated at 1 GiB; 64 MiB keeps disks alive.
SMALL_STORE = {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}

#: What ``start`` raises when the broker does not boot; the message quotes the end of its log.
BrokerStartError = ChildError


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


@dataclass
class BrokerProcess(process.BrokerProcess):
    """A benchmark's broker subprocess. ``config`` are extra ``--set KEY=VALUE`` pairs."""

    grpc_port: int | None = 0  # the 5.x endpoint (plaintext), on a free port unless set
    fault_injection: bool = True
    rss_at_boot: int | None = field(default=None, init=False)
    rss_peak: int = field(default=0, init=False)
    _sampler_stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    @property
    def namesrv(self) -> str:
        return self.namesrv_addr

    def settings(self) -> dict[str, object]:
        injection = {"faultInjectionEnable": "true"} if self.fault_injection else {}
        return {**super().settings(), **injection, **self.config}

    def start(self, timeout_s: float | None = 60.0) -> Self:
        if self.log_path is None:
            self.log_path = self.store_dir / "broker.log"
        super().start(timeout_s)
        assert self.proc is not None
        self.rss_at_boot = rss_bytes(self.proc.pid)
        self.rss_peak = self.rss_at_boot or 0
        self._sampler_stop.clear()
        threading.Thread(target=self._sample_rss, args=(self.proc,), daemon=True, name="broker-rss").start()
        return self

    def _sample_rss(self, proc) -> None:  # type: ignore[no-untyped-def]
        while not self._sampler_stop.wait(0.5):
            if proc.poll() is not None:
                return
            rss = rss_bytes(proc.pid)
            if rss:
                self.rss_peak = max(self.rss_peak, rss)

    def stop(self, timeout_s: float | None = 10.0, *, check: bool | None = None) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; the exit code (-9 when it had to be killed)."""
        self._sampler_stop.set()
        try:
            return super().stop(timeout_s, check=check)
        except ChildError:
            if check:
                raise
            return self.exit_codes[-1] if self.exit_codes else None

    def info(self) -> dict[str, object]:
        match = self.ready_match
        return {
            "started_by_mqbench": True,
            "name": match.group("name") if match else "",
            "addr": match.group("addr") if match else "",
            "namesrv": self.namesrv,
            "boot_time_s": None if self.boot_seconds is None else round(self.boot_seconds, 3),
            "rss_at_boot_bytes": self.rss_at_boot,
            "rss_peak_bytes": self.rss_peak or None,
            "config": dict(self.config),
            "fault_injection": self.fault_injection,
        }
