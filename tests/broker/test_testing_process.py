"""broker.testing.process: the one launcher of broker subprocesses for tests and benchmarks.

The generic part is driven with tiny Python children (fast, and each can misbehave on purpose); one real
broker proves the broker's part: ports kept across a restart on the same store, exit 0 on SIGTERM, the 5.x
endpoint off unless asked for, and readiness by ports.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.testing.ports import accepting, free_port
from broker.testing.process import BOOT_LINE, REPO_ROOT, BrokerProcess, ChildError, ChildProcess, set_args

# prints on both streams, says READY, then waits for SIGTERM and exits with the code given
CHILD = """
import signal, sys, time
code = int(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(code) if code >= 0 else None)
print("to stderr", file=sys.stderr, flush=True)
print("READY", flush=True)
while True:
    time.sleep(0.05)
"""


def child(tmp_path: Path, code: int = 0, **options) -> ChildProcess:
    options.setdefault("ready_line", re.compile("^READY$"))
    return ChildProcess(argv=[sys.executable, "-c", CHILD, str(code)], log_path=tmp_path / "child.log", **options)


def test_ready_line_tap_log_and_exit_code(tmp_path):
    seen: list[str] = []
    proc = child(tmp_path, on_line=seen.append, check_exit=True)
    proc.start()
    assert proc.running and proc.ready_match is not None and proc.ready_seconds is not None
    assert proc.stop() == 0 and proc.exit_codes == [0] and not proc.running
    assert "READY" in seen and "to stderr" in seen
    log = proc.log_text()
    assert "===== start #1:" in log and "READY\n" in log and "to stderr\n" in log


def test_check_exit_refuses_a_non_zero_exit_after_sigterm(tmp_path):
    proc = child(tmp_path, 3).start()
    with pytest.raises(ChildError, match="exited with code 3 after SIGTERM"):
        proc.stop(check=True)
    assert proc.exit_codes == [3]
    assert child(tmp_path, 3).start().stop() == 3  # without check the code is returned


def test_a_child_deaf_to_sigterm_is_killed_and_reported(tmp_path):
    proc = child(tmp_path, -1, stop_timeout_s=0.5).start()
    pid = proc.pid
    with pytest.raises(ChildError, match="still running 0.5 s after SIGTERM; killed"):
        proc.stop()
    assert proc.exit_codes == [-9] and not Path(f"/proc/{pid}").exists()


def test_exit_before_ready_and_never_ready_are_errors_with_the_log(tmp_path):
    early = ChildProcess(
        argv=[sys.executable, "-c", "print('bad config'); raise SystemExit(2)"],
        log_path=tmp_path / "early.log",
        ready_line=re.compile("READY"),
    )
    with pytest.raises(ChildError, match=r"exited with code 2 before it was ready(.|\n)*bad config"):
        early.start()
    never = child(tmp_path, ready_line=re.compile("^NEVER$"))
    with pytest.raises(ChildError, match="was not ready within 0.5 s"):
        never.start(timeout_s=0.5)
    assert not never.running and never.proc is None  # not left behind


def test_ready_by_ports(tmp_path):
    port = free_port()
    server = f"import socket, time; s = socket.create_server(('127.0.0.1', {port})); time.sleep(60)"
    proc = ChildProcess(argv=[sys.executable, "-c", server], ready_ports=[port], log_path=tmp_path / "server.log")
    with proc:
        assert accepting(port)
    assert not accepting(port)


def test_free_port_keeps_away_from_ports_in_use():
    first = free_port()
    assert all(abs(free_port(avoid=[first]) - first) > 2 for _ in range(20))


def test_broker_command_defaults():
    broker = BrokerProcess(Path("s"), listen_port=1, namesrv_port=5, extra_args=set_args("a=1", "b=2"))
    argv = broker.command()
    assert argv[1:3] == ["-m", "broker.main"] and argv[-4:] == ["--set", "a=1", "--set", "b=2"]
    sets = dict(arg.split("=", 1) for arg in argv[3:] if "=" in arg)
    assert sets["grpcServerPort"] == "-1" and sets["listenHost"] == "127.0.0.1" and sets["listenPort"] == "1"
    grpc = dict(
        arg.split("=", 1) for arg in BrokerProcess(Path("s"), grpc_port=7, config={"x": 1}).command() if "=" in arg
    )
    assert (grpc["grpcServerPort"], grpc["grpcTlsEnable"], grpc["x"]) == ("7", "false", "1")
    assert BOOT_LINE.match("The broker[broker-a, 127.0.0.1:1] boot success. serializeType=JSON")
    with pytest.raises(ValueError, match="ready must be"):
        BrokerProcess(Path("s"), ready="soon")


@pytest.mark.slow
def test_broker_restarts_on_the_same_store_and_ports_and_exits_0(tmp_path):
    broker = BrokerProcess(tmp_path / "store", log_path=tmp_path / "broker.log", check_exit=True, start_timeout_s=60)
    broker.start()
    try:
        ports = (broker.listen_port, broker.namesrv_port)
        assert broker.ready_match is not None and broker.ready_match["addr"] == broker.broker_addr
        assert "gRPC endpoint listening" not in broker.log_text()
        broker.restart(timeout_s=60)
        assert (broker.listen_port, broker.namesrv_port) == ports and broker.starts == 2
        assert broker.log_text().count("===== start #") == 2
    finally:
        broker.stop()
    assert broker.exit_codes == [0, 0]
    assert (tmp_path / "store" / "commitlog").is_dir()


@pytest.mark.slow
def test_broker_ready_by_ports_includes_the_grpc_endpoint(tmp_path):
    broker = BrokerProcess(tmp_path / "store", grpc_port=0, ready="ports", start_timeout_s=60)
    began = time.monotonic()
    with broker:
        assert accepting(broker.listen_port) and accepting(broker.grpc_port)
        assert broker.boot_seconds is not None and broker.boot_seconds <= time.monotonic() - began


def test_without_a_log_path_the_tap_reads_a_temporary_log_removed_at_stop(tmp_path):
    seen: list[str] = []
    proc = ChildProcess(argv=[sys.executable, "-c", CHILD, "0"], on_line=seen.append, ready_line=re.compile("READY"))
    proc.start()
    temp = proc._temp_log
    assert temp is not None and temp.exists() and "READY" in proc.log_text()
    assert proc.stop() == 0
    assert not temp.exists() and "to stderr" in seen


# A fresh interpreter (gRPC's fork handlers are decided at its import): a busy gRPC server and clients, then
# ChildProcess starts tiny children; prints how many died before they could say READY.
GRPC_THEN_CHILDREN = """
import re, sys, threading
from concurrent import futures
from pathlib import Path
import grpc
from broker.testing.process import ChildError, ChildProcess
server = grpc.server(futures.ThreadPoolExecutor(2))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
stop = threading.Event()
def connect():
    while not stop.is_set():
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            grpc.channel_ready_future(channel).result(timeout=1)
        except grpc.FutureTimeoutError:
            pass
        channel.close()
for _ in range(2):
    threading.Thread(target=connect, daemon=True).start()
died = 0
for i in range(int(sys.argv[1])):
    child = ChildProcess(argv=[sys.executable, "-c", "print('READY', flush=True)"], ready_line=re.compile("^READY$"),
                         log_path=Path(sys.argv[2]) / f"child{i}.log", start_timeout_s=20)
    try:
        child.start()
    except ChildError:
        died += 1
    child.stop()
stop.set()
print("died", died)
"""


@pytest.mark.parametrize("fork_support", ["unset", "false"])
def test_children_start_beside_a_busy_grpc_in_this_process(tmp_path, fork_support):
    """gRPC's fork handlers, live when it was imported without GRPC_ENABLE_FORK_SUPPORT=false, used to kill most
    children started after it (forked for their preexec_fn) before exec; both ways, every child now starts."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    if fork_support != "unset":
        env["GRPC_ENABLE_FORK_SUPPORT"] = fork_support
    env["PYTHONPATH"] = str(REPO_ROOT)
    out = subprocess.run(
        [sys.executable, "-c", GRPC_THEN_CHILDREN, "30", str(tmp_path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "died 0" in out.stdout, out.stdout + out.stderr[-2000:]


def test_the_suite_runs_with_grpc_fork_handlers_off():
    assert os.environ.get("GRPC_ENABLE_FORK_SUPPORT") == "false"  # tests/conftest.py, before any gRPC import
