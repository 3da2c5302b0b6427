"""The Apache RocketMQ 4.9.7 Java client with each of its header serializations: JSON (its default) and ROCKETMQ
(``-Drocketmq.serialize.type=ROCKETMQ``, every request's header in the binary form, answered in kind). Sends a
few messages and consumes them with a push consumer (routes, heartbeats, sends, pulls, offset commits all in
that serialization), through ``AclRoundTrip.java`` without credentials."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from compat_support import unique

RMQJAVA = shutil.which("rmqjava") or "/root/.cache/apache-rocketmq-4.9.7/bin/rmqjava"
JAVA_SOURCE = Path(__file__).parent / "java" / "AclRoundTrip.java"

pytestmark = [
    pytest.mark.compat,
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.access(RMQJAVA, os.X_OK), reason="the Apache RocketMQ 4.9.7 Java client (rmqjava) is not installed"
    ),
]


@pytest.mark.parametrize("serialize", ["JSON", "ROCKETMQ"])
def test_java_client_sends_and_consumes_with_each_header_serialization(broker, serialize: str) -> None:
    topic, group = unique(f"T_java_{serialize}"), unique(f"CG_java_{serialize}")
    mark = broker.log_size()
    proc = subprocess.run(
        [RMQJAVA, f"-Drocketmq.serialize.type={serialize}", str(JAVA_SOURCE), broker.namesrv_addr, topic, group]
        + ["", "", "8"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    detail = proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.returncode == 0 and events and events[-1]["event"] == "done", detail
    assert [e["key"] for e in events if e["event"] == "sent"] == [f"k{i}" for i in range(8)], detail
    assert sorted({e["key"] for e in events if e["event"] == "received"}) == [f"k{i}" for i in range(8)], detail
    assert events[-1]["complete"] is True
    log = broker.log_text(mark)
    assert "Traceback" not in log and "bad request header" not in log
