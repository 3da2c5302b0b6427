"""Issue 13 item 1, end to end on a broker subprocess: the send-back that bricked the broker (group "G\\0") and
the one that escaped its store now cost one answer each; the broker keeps storing and dispatching, a C++ client
round trip loses nothing, SIGTERM exits 0, it boots again on the same store, and no traceback was logged."""

from __future__ import annotations

import asyncio
import os

import orjson
import pytest
from compat_support import cpp_producer, cpp_pull_all, make_message, nul_free_body, unique

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand

pytestmark = pytest.mark.compat

rocketmq = pytest.importorskip("rocketmq.client", reason="the rocketmq==0.4.4 wheel is part of the test extra")
from rocketmq.client import SendStatus  # noqa: E402 (after the importorskip)


def _send_back(group: str) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "group": group,
            "offset": "0",
            "delayLevel": "0",
            "originMsgId": "",
            "originTopic": "T",
            "unitMode": "false",
            "maxReconsumeTimes": "16",
        },
    )


def _heartbeat(group: str) -> RemotingCommand:
    body = {
        "clientID": "fuzz",
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [],
                "unitMode": False,
            }
        ],
    }
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, orjson.dumps(body))


async def _attack(addr: str) -> list[int]:
    client = RemotingClient()
    try:
        codes = []
        for group in ("G\u0000", "x/../../../escaped", "y" * 200_000):
            codes.append((await client.invoke(addr, _send_back(group), 10)).code)
            codes.append((await client.invoke(addr, _heartbeat(group), 10)).code)
        return codes
    finally:
        await client.close()


def test_bad_names_cost_one_answer_and_the_broker_keeps_working(broker_factory, tmp_path):
    b = broker_factory.start()
    with cpp_producer(b.namesrv_addr) as producer:  # a message at CommitLog offset 0 for the send-backs
        assert producer.send_sync(make_message(unique("T_first"), b"first")).status == SendStatus.OK
    codes = asyncio.run(_attack(b.broker_addr))
    assert ResponseCode.SUCCESS not in codes and ResponseCode.SYSTEM_ERROR in codes
    topic = unique("T_after")
    sent = {f"k{i}": nul_free_body(200, seed=f"k{i}:") for i in range(20)}
    with cpp_producer(b.namesrv_addr) as producer:
        for key, body in sent.items():
            assert producer.send_sync(make_message(topic, body, key=key)).status == SendStatus.OK
    got = cpp_pull_all(b.namesrv_addr, unique("CG"), topic)["messages"]
    assert sorted(m["key"] for m in got) == sorted(sent)
    b.stop()  # SIGTERM: must exit 0
    b.start()  # and boot again on the same store
    b.stop()
    log = b.log_text()
    assert "Traceback" not in log
    assert not [p for p, _, _ in os.walk(tmp_path) if "escaped" in p]
