"""The one way tests and benchmarks start a broker (or another server) as a child process.

``BrokerProcess`` runs ``python -m broker.main`` (what ``mqbroker`` runs) on free loopback ports and waits until
it is ready: its boot line ``The broker[NAME, IP:PORT] boot success...`` on stdout, or its ports accepting
connections (``ready="ports"``, for boot-time figures). It is what only a process shows that the in-process
``EmbeddedBroker`` cannot: the exit code after SIGTERM (a graceful stop exits 0), a restart on the same store and
ports, a SIGKILL and the recovery after it, the real stdout/stderr, clients in other processes.

``ChildProcess`` under it is the generic part, also used for the store's crash driver and the Spark daemons:
stdout and stderr go straight into one log file (``log_path``; the child never blocks on a busy test process),
which a thread follows like ``tail -f`` when something needs the lines: the ready line (a pattern) and the
optional tap (``on_line(line)``). Readiness is that line and/or ports accepting. The child gets SIGTERM when
the thread that started it dies (Linux), so a killed test run never leaves a server behind (not when gRPC's fork
handlers are live in this process: ``child_preexec``).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from broker.testing.ports import accepting, free_port

#: The checkout whose broker runs by default: its root is the child's working directory and first import path.
REPO_ROOT = Path(__file__).resolve().parents[2]
BOOT_LINE = re.compile(r"^\s*The broker\[(?P<name>[^,\]]*), (?P<addr>[^\]]+)\] boot success")

LineTap = Callable[[str], None]  # one line of the child's output (stdout and stderr), without its newline


class ChildError(RuntimeError):
    """The child misbehaved at its boundary: exited before it was ready, never got ready, hung on SIGTERM, or
    (``stop(check=True)``) exited with a code other than 0. The text ends with the tail of its log."""


def set_args(*settings: str) -> tuple[str, ...]:
    """``"key=value"`` strings as ``--set key=value`` arguments (for ``BrokerProcess.extra_args``)."""
    return tuple(arg for kv in settings for arg in ("--set", kv))


_FALSE = frozenset(("0", "false", "no", "off"))


def child_preexec() -> Callable[[], None] | None:
    """The ``preexec_fn`` for a child: ``die_with_parent``, unless gRPC's fork handlers are live in this process.

    A ``preexec_fn`` makes ``subprocess`` fork() instead of vfork(), and fork() runs the handlers gRPC registers
    (grpcio turns them on unless ``GRPC_ENABLE_FORK_SUPPORT`` is false when it is imported): in the child they
    restart gRPC's poller threads, which die on the epoll descriptor ``subprocess`` closes before exec, and the
    child aborts (SIGABRT or SIGSEGV) before it runs anything: a broker that "exited with code -6 before it was
    ready". Measured: 208 of 300 children so started died beside a busy gRPC server, none with the variable false
    or without the ``preexec_fn``. The test suite sets the variable before anything imports gRPC (tests/conftest.py);
    a process that imported gRPC without it gets no ``preexec_fn`` (vfork, no handlers), and its children lose
    only the death-with-parent safety net, not their start."""
    if "grpc" in sys.modules and os.environ.get("GRPC_ENABLE_FORK_SUPPORT", "true").strip().lower() not in _FALSE:
        return None
    return die_with_parent


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGTERM when the thread that started it dies (Linux ``PR_SET_PDEATHSIG``).
    Start children from a thread that lives as long as they should (a fixture's, the main thread)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


@dataclass(kw_only=True)
class ChildProcess:
    """One child process; ``argv`` runs in ``cwd`` with ``env`` over this process's environment.

    ``check_exit``: ``stop()`` raises unless the child exits 0 (the broker's promise for SIGTERM).
    """

    argv: Sequence[str] = ()
    cwd: Path = REPO_ROOT
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: Path | None = None  # None: a temporary file while a tap or ready line needs one, else nowhere
    on_line: LineTap | None = None
    ready_line: re.Pattern[str] | None = None  # searched in every output line until it matches once
    ready_ports: Sequence[int] = ()  # and/or: these loopback ports accept connections
    start_timeout_s: float = 30.0
    stop_timeout_s: float = 15.0
    stop_signal: int = signal.SIGTERM
    process_group: bool = False  # signal the child's whole process group (a launcher script and its JVM)
    check_exit: bool = False
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    starts: int = field(default=0, init=False)
    exit_codes: list[int] = field(default_factory=list, init=False)
    ready_seconds: float | None = field(default=None, init=False)  # exec to ready, of the last start
    ready_match: re.Match[str] | None = field(default=None, init=False)
    _follower: threading.Thread | None = field(default=None, init=False, repr=False)
    _exited: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _ready: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _temp_log: Path | None = field(default=None, init=False, repr=False)

    # -- what to run (subclasses build it) ------------------------------------------------------------
    def command(self) -> list[str]:
        return list(self.argv)

    def environment(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self, timeout_s: float | None = None) -> Self:
        """Start the child and wait until it is ready; on failure it is not left running."""
        if self.running:
            raise ChildError(f"{self.what()} already running")
        argv = self.command()
        self._ready.clear()
        self._exited.clear()
        self.ready_match = None
        log = self._log_file()
        began = time.perf_counter()
        if log is None:
            self.proc = self._popen(argv, subprocess.DEVNULL)
        else:
            # The child writes straight into the file: it never waits on us, however busy this process is.
            with open(log, "ab") as out:
                out.write(f"\n===== start #{self.starts + 1}: {shlex.join(argv)}\n".encode())
                out.flush()
                begin = out.tell()
                self.proc = self._popen(argv, out)
            if self.on_line is not None or self.ready_line is not None:
                self._follower = threading.Thread(
                    target=self._follow, args=(log, begin), daemon=True, name=f"follow-{self.what()}"
                )
                self._follower.start()
        self.starts += 1
        try:
            self._wait_ready(began, self.start_timeout_s if timeout_s is None else timeout_s)
        except BaseException:
            self.kill()
            raise
        self.ready_seconds = time.perf_counter() - began
        return self

    def _popen(self, argv: list[str], out: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            cwd=self.cwd,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=child_preexec(),
        )

    def _wait_ready(self, began: float, timeout_s: float) -> None:
        assert self.proc is not None
        ports = set(self.ready_ports)
        line_seen = self.ready_line is None
        while True:
            line_seen = line_seen or self._ready.is_set()
            ports = {p for p in ports if not accepting(p)}
            if line_seen and not ports:
                return
            if self.proc.poll() is not None:
                self._end_follower()  # the follower reads to the end: the ready line may be there after all
                if self._ready.is_set() and not ports:
                    return
                raise ChildError(
                    f"{self.what()} exited with code {self.proc.returncode} before it was ready\n{self.tail()}"
                )
            if time.perf_counter() - began > timeout_s:
                raise ChildError(
                    f"{self.what()} was not ready within {timeout_s:g} s "
                    f"(waiting for {'its ready line' if not line_seen else f'ports {sorted(ports)}'}; "
                    f"command: {shlex.join(self.command())})\n{self.tail()}"
                )
            # ports are polled often: boot-time figures are taken from this loop
            self._ready.wait(0.002 if ports else 0.05)

    def stop(self, timeout_s: float | None = None, *, check: bool | None = None) -> int | None:
        """``stop_signal`` (SIGTERM) and wait; a child still running after ``stop_timeout_s`` is killed and this
        raises. With ``check`` (default: ``check_exit``), an exit code other than 0 raises too."""
        check = self.check_exit if check is None else check
        proc = self.proc
        if proc is None:
            return None
        self.proc = None
        problem = ""
        if proc.poll() is None:
            self._signal(proc, self.stop_signal)
            limit = self.stop_timeout_s if timeout_s is None else timeout_s
            try:
                proc.wait(limit)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait()
                problem = f"still running {limit:g} s after {signal.Signals(self.stop_signal).name}; killed"
        rc = proc.returncode
        self.exit_codes.append(rc)
        if not problem and check and rc != 0:
            problem = (
                f"exited with code {rc} after {signal.Signals(self.stop_signal).name} (a graceful stop must exit 0)"
            )
        self._end_follower()
        try:
            if problem:
                raise ChildError(f"{self.what()} {problem}\n{self.tail()}")
        finally:
            self._forget_temp_log()
        return rc

    def kill(self) -> None:
        """SIGKILL (nothing is flushed: a crash) and wait; what it wrote so far stays in the log."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            self._signal(proc, signal.SIGKILL)
        proc.wait()
        self._end_follower()
        self._forget_temp_log()

    def restart(self, timeout_s: float | None = None) -> Self:
        """A graceful stop (which must exit 0), then a start with the same command (same store and ports)."""
        self.stop(check=True)
        return self.start(timeout_s)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _signal(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        try:
            if self.process_group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except ProcessLookupError:
            pass

    # -- output -----------------------------------------------------------------------------------------
    def _log_file(self) -> Path | None:
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            return self.log_path
        if self.on_line is None and self.ready_line is None:
            return None
        if self._temp_log is None:
            fd, name = tempfile.mkstemp(prefix="child-", suffix=".log")
            os.close(fd)
            self._temp_log = Path(name)
        return self._temp_log

    def _follow(self, log: Path, offset: int) -> None:
        """Read the log as the child appends to it (``tail -f``): the ready line, then every line to the tap.
        Ends once the child has exited and everything it wrote was read (without a tap: at the ready line)."""
        pending = b""
        with open(log, "rb") as f:
            f.seek(offset)
            while True:
                exited = self._exited.is_set()
                chunk = f.read(1 << 16)
                if chunk:
                    *lines, pending = (pending + chunk).split(b"\n")
                    for raw in lines:
                        self._line(raw)
                    if self.on_line is None and self._ready.is_set():
                        return  # only the ready line was wanted: stop polling the log
                    continue
                if exited:
                    if pending:  # the last line, cut short by the exit
                        self._line(pending)
                    return
                # until the ready line, as often as ``_wait_ready`` polls ports: a start's figure (vs_java's
                # "start to ports open") must not carry up to 20 ms of this poll
                self._exited.wait(0.02 if self._ready.is_set() else 0.002)

    def _line(self, raw: bytes) -> None:
        if self.on_line is None and (self.ready_line is None or self._ready.is_set()):
            return
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if self.ready_line is not None and not self._ready.is_set():
            match = self.ready_line.search(line)
            if match:
                self.ready_match = match
                self._ready.set()
        if self.on_line is not None:
            self.on_line(line)

    def _end_follower(self) -> None:
        """After the child exited: let the follower read to the end of the log."""
        self._exited.set()
        if self._follower is not None:
            self._follower.join(10.0)
            self._follower = None

    def _forget_temp_log(self) -> None:
        if self._temp_log is not None:
            self._temp_log.unlink(missing_ok=True)
            self._temp_log = None

    def log_size(self) -> int:
        if self.log_path is None:
            return 0
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_text(self, since: int = 0) -> str:
        """The log from byte offset ``since`` (a ``log_size()`` taken earlier)."""
        path = self.log_path or self._temp_log
        if path is None:
            return ""
        try:
            with open(path, "rb") as f:
                f.seek(since)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 60, since: int = 0) -> str:
        path = self.log_path or self._temp_log
        if path is None:
            return f"--- {self.what()}: output not kept (no log_path) ---"
        text = self.log_text(since).splitlines()[-lines:]
        return f"--- {self.what()} log {path} (last {len(text)} lines) ---\n" + "\n".join(text)

    def what(self) -> str:
        return Path(self.command()[0]).name if self.command() else "child"


@dataclass
class BrokerProcess(ChildProcess):
    """``python -m broker.main`` on loopback: ports chosen once (0 means a free one) and kept across restarts.

    ``config``: broker.conf keys over the defaults below, passed as ``--set KEY=VALUE``; ``extra_args`` follow
    them as given. ``grpc_port``: None leaves the 5.x endpoint off (its default port 8081 would be shared by
    every broker), 0 takes a free port (plaintext unless ``grpc_tls``). ``ready``: "boot-line" or "ports"
    (the remoting and gRPC ports accept connections: what boot-time figures measure).
    ``root``: the source tree to run (working directory and first import path), this checkout by default.
    """

    store_dir: Path
    config: Mapping[str, object] = field(default_factory=dict)
    extra_args: Sequence[str] = ()
    listen_port: int = 0
    namesrv_port: int = 0
    grpc_port: int | None = None
    grpc_tls: bool = False
    broker_name: str = "broker-a"
    ready: str = "boot-line"
    root: Path = REPO_ROOT
    python: str = sys.executable

    def __post_init__(self) -> None:
        if self.ready not in ("boot-line", "ports"):
            raise ValueError(f"ready must be 'boot-line' or 'ports', not {self.ready!r}")
        self.cwd = self.root

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.listen_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def settings(self) -> dict[str, object]:
        """Every ``--set`` key of the command line, defaults first."""
        settings: dict[str, object] = {
            "listenPort": self.listen_port,
            "namesrvListenPort": self.namesrv_port,
            "storePathRootDir": self.store_dir,
            "brokerIP1": "127.0.0.1",
            "brokerName": self.broker_name,
            # servers listen on loopback only (the broker binds 0.0.0.0 by default)
            "listenHost": "127.0.0.1",
            "namesrvListenHost": "127.0.0.1",
            "grpcServerPort": -1 if self.grpc_port is None else self.grpc_port,
        }
        if self.grpc_port is not None:
            settings |= {"grpcListenHost": "127.0.0.1", "grpcTlsEnable": "true" if self.grpc_tls else "false"}
        return settings | dict(self.config)

    def command(self) -> list[str]:
        argv = [self.python, "-m", "broker.main"]
        for key, value in self.settings().items():
            argv += ["--set", f"{key}={value}"]
        return [*argv, *self.extra_args]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root), os.environ.get("PYTHONPATH")]))
        return env

    def what(self) -> str:
        return f"broker {self.broker_addr}"

    def start(self, timeout_s: float | None = None) -> Self:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        if not self.listen_port:
            self.listen_port = free_port()
        if not self.namesrv_port:
            self.namesrv_port = free_port(avoid=[self.listen_port])
        if self.grpc_port == 0:
            self.grpc_port = free_port(avoid=[self.listen_port, self.namesrv_port])
        if self.ready == "ports":
            self.ready_line = None
            self.ready_ports = [self.listen_port] + ([] if self.grpc_port is None else [self.grpc_port])
        else:
            self.ready_line, self.ready_ports = BOOT_LINE, ()
        return super().start(timeout_s)

    @property
    def boot_seconds(self) -> float | None:
        return self.ready_seconds
