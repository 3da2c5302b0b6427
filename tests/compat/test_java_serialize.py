"""The Apache RocketMQ 4.9.7 Java client with each of its header serializations: JSON (its default) and ROCKETMQ
(``-Drocketmq.serialize.type=ROCKETMQ``, every request's header in the binary form, answered in kind). Sends a
few messages and consumes them with a push consumer (routes, heartbeats, sends, pulls, offset commits all in
that serialization), through ``AclRoundTrip.java`` without credentials."""

from __future__ import annotations

import json

import pytest
from compat_support import JAVA_MISSING, java_client_missing, run_java_source, unique

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.skipif(java_client_missing(), reason=JAVA_MISSING)]


@pytest.mark.parametrize("serialize", ["JSON", "ROCKETMQ"])
def test_java_client_sends_and_consumes_with_each_header_serialization(broker, serialize: str) -> None:
    topic, group = unique(f"T_java_{serialize}"), unique(f"CG_java_{serialize}")
    mark = broker.log_size()
    events = run_java_source(
        "AclRoundTrip.java", [broker.namesrv_addr, topic, group, "", "", "8"], 180, serialize=serialize
    )
    detail = json.dumps(events[-20:])
    assert [e["key"] for e in events if e["event"] == "sent"] == [f"k{i}" for i in range(8)], detail
    assert sorted({e["key"] for e in events if e["event"] == "received"}) == [f"k{i}" for i in range(8)], detail
    assert events[-1]["complete"] is True
    log = broker.log_text(mark)
    assert "Traceback" not in log and "bad request header" not in log
