"""What the README's incident section promises each client shows for a busy answer, checked with the client.

A send stalled behind ``stall_queue`` is answered ``[TIMEOUT_CLEAN_QUEUE]`` (code 2). The Java client
and ali-ons hand the remark to the application in their exception; the C++ wheel does not (its
"No route info of this topic" and the remark in its log are checked by test_flow_cpp.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from flow_support import TIMEOUT_RE, unique, wait_sweeper_started

from mqclient.fault import inject_fault

pytestmark = pytest.mark.compat

from compat_support import ensure_node_modules, node_missing_reason, run_ons  # noqa: E402 - path set by flow_support

RMQ_HOME = Path.home() / ".cache" / "apache-rocketmq-4.9.7"
JAVA_SOURCE = """
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;

public class BusySend {
    public static void main(String[] args) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("PG_busy_java");
        producer.setNamesrvAddr(args[0]);
        producer.start();
        try {
            System.out.println("sent " + producer.send(new Message(args[1], "hello".getBytes())));
        } catch (Exception e) {
            System.out.println("exception " + e);
        } finally {
            producer.shutdown();
        }
    }
}
"""


@pytest.fixture
def stalled(brokers):
    """(the one-worker broker, ``stall()``): ``stall()`` stalls its send queue for 20 s (a JVM takes seconds
    to start); the stall is cleared after the test."""
    b = brokers.get("one_worker")
    wait_sweeper_started(b)
    try:
        yield b, lambda: inject_fault(b.broker_addr, "stall_queue", duration_ms=20_000, target="send")
    finally:
        inject_fault(b.broker_addr, "clear")


@pytest.mark.skipif(node_missing_reason() is not None, reason=str(node_missing_reason()))
def test_ali_ons_shows_the_remark(stalled):
    broker, stall = stalled
    ensure_node_modules()
    stall()
    run = run_ons({"nameSrv": broker.namesrv_addr, "mode": "produce", "topic": unique("T_busy_ons"), "count": 1})
    [error] = run.of("send_error")
    assert error["code"] == 2 and re.fullmatch(TIMEOUT_RE, error["message"]), run.describe()


def java_tools() -> tuple[str, Path] | None:
    javac, rmqjava = shutil.which("javac"), RMQ_HOME / "bin" / "rmqjava"
    return (javac, rmqjava) if javac and rmqjava.exists() else None


@pytest.mark.skipif(java_tools() is None, reason="javac or the Apache RocketMQ 4.9.7 client (rmqjava) is missing")
def test_java_client_shows_the_remark(stalled, tmp_path):
    broker, stall = stalled
    javac, rmqjava = java_tools()  # type: ignore[misc]
    (tmp_path / "BusySend.java").write_text(JAVA_SOURCE)
    classpath = f"{tmp_path}:{RMQ_HOME / 'lib'}/*"
    subprocess.run(
        [javac, "-cp", classpath, "BusySend.java"], cwd=tmp_path, check=True, capture_output=True, timeout=120
    )
    stall()
    proc = subprocess.run(
        [str(rmqjava), "-cp", classpath, "BusySend", broker.namesrv_addr, unique("T_busy_java")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(("sent ", "exception "))), proc.stdout)
    assert line.startswith(
        "exception org.apache.rocketmq.client.exception.MQBrokerException: CODE: 2  DESC: "
        "[TIMEOUT_CLEAN_QUEUE]broker busy"
    ), proc.stdout + proc.stderr[-2000:]
