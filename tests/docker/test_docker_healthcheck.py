"""docker/healthcheck.py: one GET_BROKER_RUNTIME_INFO over the remoting protocol, exit 0 only on SUCCESS.

Against small fake servers (answers, errors, silence, binary headers, interleaved server requests),
the address discovery from a fake /proc, and once against the real broker.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker.testing.process import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docker" / "healthcheck.py"


def _load():
    spec = importlib.util.spec_from_file_location("mini_rocketmq_healthcheck", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


hc = _load()


def json_frame(header: dict, body: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


def read_request(conn: socket.socket) -> dict:
    (length,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
    frame = conn.recv(length, socket.MSG_WAITALL)
    (hl,) = struct.unpack_from(">i", frame)
    assert hl >> 24 == 0, "the health check sends JSON headers"
    assert len(frame) == 4 + (hl & 0xFFFFFF), "the health check sends no body"
    return json.loads(frame[4 : 4 + hl])


@contextmanager
def fake_broker(answer: Callable[[socket.socket, dict], None]) -> Iterator[int]:
    """A one-thread server that reads a request and lets ``answer`` reply; yields its port."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(10)
    seen: list[dict] = []

    def serve() -> None:
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        with conn:
            request = read_request(conn)
            seen.append(request)
            answer(conn, request)
            time.sleep(0.2)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()
        thread.join(5)
    for request in seen:
        assert request["code"] == 28 and request["flag"] == 0 and request["extFields"] == {}


def reply(code: int, remark: str | None = None) -> Callable[[socket.socket, dict], None]:
    def answer(conn: socket.socket, request: dict) -> None:
        header = {"code": code, "flag": 1, "opaque": request["opaque"], "language": "JAVA", "version": 409}
        if remark:
            header["remark"] = remark
        conn.sendall(json_frame(header, b'{"table":{"brokerVersion":"409"}}'))

    return answer


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=30, check=False)


def test_success_answer_is_healthy() -> None:
    with fake_broker(reply(0)) as port:
        proc = run_script("--addr", f"127.0.0.1:{port}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"healthy: broker at 127.0.0.1:{port}")


def test_error_answer_is_unhealthy_with_the_remark() -> None:
    with fake_broker(reply(1, "store not ready")) as port:
        proc = run_script("--addr", f"127.0.0.1:{port}")
    assert proc.returncode == 1
    assert "answered code 1: store not ready" in proc.stderr


def test_nothing_listening_is_unhealthy() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    proc = run_script("--addr", f"127.0.0.1:{port}", "--timeout", "2")
    assert proc.returncode == 1
    assert f"cannot reach 127.0.0.1:{port}" in proc.stderr


def test_silent_server_is_unhealthy_after_the_timeout() -> None:
    released = threading.Event()

    def silent(conn: socket.socket, request: dict) -> None:
        released.wait(30)

    with fake_broker(silent) as port:
        proc = run_script("--addr", f"127.0.0.1:{port}", "--timeout", "0.5")
        released.set()
    # "no answer" (not "connection closed"): the check gave up on its own while the server still held on.
    assert proc.returncode == 1
    assert "no answer from" in proc.stderr and "within 0.5s" in proc.stderr


def test_server_request_before_the_reply_is_skipped() -> None:
    def interleaved(conn: socket.socket, request: dict) -> None:
        # A broker→client request (e.g. NOTIFY_CONSUMER_IDS_CHANGED) with another opaque comes first.
        conn.sendall(json_frame({"code": 40, "flag": 2, "opaque": 77, "extFields": {"consumerGroup": "g"}}))
        reply(0)(conn, request)

    with fake_broker(interleaved) as port:
        proc = run_script("--addr", f"127.0.0.1:{port}")
    assert proc.returncode == 0, proc.stderr


def test_binary_header_reply_is_understood() -> None:
    def binary(conn: socket.socket, request: dict) -> None:
        # ROCKETMQ header: code, language, version, opaque, flag, remark len, ext len.
        header = struct.pack(">hbhiiii", 0, 0, 409, request["opaque"], 1, 0, 0)
        conn.sendall(struct.pack(">ii", 4 + len(header), (1 << 24) | len(header)) + header)

    with fake_broker(binary) as port:
        proc = run_script("--addr", f"127.0.0.1:{port}")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">i", 0),  # zero length
        struct.pack(">ii", 6, 200) + b"{}",  # header length beyond the frame
        struct.pack(">ii", 7, 3) + b"abc",  # not JSON
        struct.pack(">ii", 6, (5 << 24) | 2) + b"{}",  # unknown serialise type
    ],
)
def test_garbage_reply_is_unhealthy_not_a_crash(frame: bytes) -> None:
    with fake_broker(lambda conn, request: conn.sendall(frame)) as port:
        proc = run_script("--addr", f"127.0.0.1:{port}", "--timeout", "1")
    assert proc.returncode == 1
    assert proc.stderr.startswith("unhealthy: ") and "Traceback" not in proc.stderr


def test_bad_addr_is_a_clear_error() -> None:
    proc = run_script("--addr", "localhost")
    assert proc.returncode == 1
    assert "expected HOST:PORT" in proc.stderr


# -- where to ask ---------------------------------------------------------------------------------------


def test_target_precedence(tmp_path: Path) -> None:
    argv = ["python3", "/opt/mini-rocketmq/bin/mqbroker", "--set", "listenPort=20911"]
    assert hc.resolve_target("10.0.0.1:1", {"MINI_ROCKETMQ_HEALTHCHECK_ADDR": "10.0.0.2:2"}, argv).port == 1
    assert hc.resolve_target(None, {"MINI_ROCKETMQ_HEALTHCHECK_ADDR": "10.0.0.2:2"}, argv).port == 2
    assert hc.resolve_target(None, {}, argv) == hc.Target("127.0.0.1", 20911, "broker command line")
    assert hc.resolve_target(None, {}, None) == hc.Target("127.0.0.1", 10911, "default")


def test_settings_from_conf_file_then_sets(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# listenPort=1\nlistenPort = 30911\nlistenHost:10.9.8.7\nbrokerName broker-b\n")
    settings = hc.broker_settings(["mqbroker", "-c", str(conf)])
    assert settings["listenPort"] == "30911" and settings["listenHost"] == "10.9.8.7"
    assert settings["brokerName"] == "broker-b"
    settings = hc.broker_settings(
        ["mqbroker", f"--config={conf}", "--set=listenPort=40911", "--set", "listenHost=0.0.0.0"]
    )
    assert settings["listenPort"] == "40911"
    assert hc.resolve_target(None, {}, ["mqbroker", "-c", str(conf)]) == hc.Target(
        "10.9.8.7", 30911, "broker command line"
    )


def test_missing_conf_file_falls_back_to_defaults() -> None:
    assert hc.resolve_target(None, {}, ["mqbroker", "-c", "/nonexistent/broker.conf"]).port == 10911


def test_bad_listen_port_is_a_clear_error() -> None:
    with pytest.raises(hc.HealthError, match="not a port"):
        hc.resolve_target(None, {}, ["mqbroker", "--set", "listenPort=abc"])


def test_find_broker_in_proc(tmp_path: Path) -> None:
    def proc_entry(pid: int, argv: list[str]) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")

    (tmp_path / "self").mkdir()
    proc_entry(1, ["catatonit", "--", "/usr/local/bin/mini-rocketmq-entrypoint"])
    proc_entry(7, ["/opt/mini-rocketmq/bin/python3", "/opt/mini-rocketmq/bin/mqbroker", "--set", "listenPort=5"])
    proc_entry(9, ["python3", "-m", "broker.main"])
    assert hc.find_broker_argv(tmp_path)[-1] == "listenPort=5"
    assert hc.find_broker_argv(tmp_path / "missing") is None


# -- the real broker --------------------------------------------------------------------------------------


def test_real_broker_is_healthy(tmp_path: Path) -> None:
    pytest.importorskip("broker.main")
    with BrokerProcess(tmp_path / "store", log_path=tmp_path / "broker.log", start_timeout_s=60) as broker:
        # Found from the command line, as inside the container (--addr not given, no env).
        target = hc.resolve_target(None, {}, broker.command())
        assert (target.host, target.port) == ("127.0.0.1", broker.listen_port)
        hc.probe(target.host, target.port, timeout_s=10)
        proc = run_script("--addr", broker.broker_addr, "--timeout", "10")
        assert proc.returncode == 0, proc.stderr
