"""Logs: JSON lines when stderr is not a terminal (a container), console lines in a terminal, and
request-level debug lines switched on and off while the broker runs (through mqadmin)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.testing.process import BOOT_LINE, BrokerProcess
from mqclient.mqadmin import main as mqadmin

REPO = Path(__file__).resolve().parents[2]


class LoggingBroker:
    """The test launcher's broker with its log lines (stderr) collected as they come, as a reader would see them."""

    def __init__(self, tmp_path: Path, env: dict[str, str] | None = None) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.process = BrokerProcess(
            tmp_path / "store",
            config={"mappedFileSizeCommitLog": 1048576, "maxIndexNum": 1000, "maxHashSlotNum": 100},
            env=env or {},
            log_path=tmp_path / "broker.log",
            on_line=self._tap,
        ).start()
        self.port = self.process.listen_port
        self.namesrv = self.process.namesrv_addr

    def _tap(self, line: str) -> None:
        if not BOOT_LINE.search(line):  # the one line on stdout; the log is stderr
            self.lines.put(line)

    def drain_now(self, wait_s: float = 0.2) -> str:
        deadline, out = time.monotonic() + wait_s, []
        while True:
            try:
                out.append(self.lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                return "\n".join(out)

    def wait_for(self, predicate, timeout_s: float = 15.0) -> list[str]:
        seen, deadline = [], time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            seen.append(line)
            if predicate(line):
                return seen
        pytest.fail("log line never came; saw:\n" + "\n".join(seen))

    def stop(self) -> None:
        self.process.stop()


@pytest.fixture
def json_broker(tmp_path):
    broker = LoggingBroker(tmp_path)
    yield broker
    broker.stop()


def _event(line: str) -> dict | None:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def test_json_lines_and_request_logging_switched_at_run_time(json_broker, capsys):
    lines = json_broker.wait_for(lambda line: "remoting server listening" in line)
    events = [_event(line) for line in lines]
    assert all(e is not None for e in events), lines  # every line is one JSON object
    first = events[0]
    assert {"event", "level", "timestamp", "logger"} <= set(first)
    assert first["timestamp"].endswith("Z")

    assert mqadmin(["setLogLevel", "-c", "DefaultCluster", "--request-log", "true", "-n", json_broker.namesrv]) == 0
    assert mqadmin(["topicList", "-n", json_broker.namesrv]) == 0  # topicList asks the name server only
    assert mqadmin(["brokerStatus", "-b", f"127.0.0.1:{json_broker.port}", "-n", json_broker.namesrv]) == 0
    capsys.readouterr()
    lines = json_broker.wait_for(lambda line: '"code": 28' in line)
    request = _event(lines[-1])
    assert request["event"] == "request" and request["level"] == "debug" and request["logger"] == "broker.requests"
    assert (request["answer"], request["queue"]) == (0, "admin") and request["remote"].startswith("127.0.0.1:")

    assert mqadmin(["setLogLevel", "-c", "DefaultCluster", "--request-log", "false", "-n", json_broker.namesrv]) == 0
    json_broker.wait_for(lambda line: "request logging switched" in line)
    assert mqadmin(["brokerStatus", "-b", f"127.0.0.1:{json_broker.port}", "-n", json_broker.namesrv]) == 0
    later = json_broker.drain_now(1.0)
    assert '"event": "request"' not in later


def test_console_format_when_asked(tmp_path):
    broker = LoggingBroker(tmp_path, env={"MINI_ROCKETMQ_LOG_FORMAT": "console"})
    try:
        lines = broker.wait_for(lambda line: "remoting server listening" in line)
    finally:
        broker.stop()
    assert all(_event(line) is None for line in lines)
    assert "[info     ] remoting server listening" in lines[-1]


def test_configure_picks_console_for_a_terminal_and_rejects_bad_names():
    code = """
import io, sys
from broker import logging_setup
import structlog

class Tty(io.StringIO):
    def isatty(self):
        return True

tty = Tty()
logging_setup.configure(stream=tty)
structlog.get_logger("x").info("hello", key=1)
assert "hello" in tty.getvalue() and not tty.getvalue().startswith("{"), tty.getvalue()
pipe = io.StringIO()
logging_setup.configure(stream=pipe, level="warn")
structlog.get_logger("x").info("hidden")
structlog.get_logger("x").warning("shown")
assert pipe.getvalue().count("\\n") == 1 and '"shown"' in pipe.getvalue(), pipe.getvalue()
for bad in ({"fmt": "xml"}, {"level": "LOUD"}):
    try:
        logging_setup.configure(stream=pipe, **bad)
    except ValueError as exc:
        print("refused:", exc)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "refused: unknown log format 'xml'; expected json or console",
        ("refused: unknown log level 'LOUD'; expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ]
