"""Start an in-process broker (BrokerController on the running event loop) on free loopback ports."""

from __future__ import annotations

import asyncio
import time

from broker.controller import BrokerController
from broker.testing.in_loop import start_in_loop
from broker.testing.ports import free_port  # noqa: F401 - tests take it from here
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.headers import SendMessageRequestHeader, encode_header
from remoting.offline_channel import OfflineChannel
from store.message import encode_properties


async def start_broker(tmp_path, **overrides) -> BrokerController:
    """A broker on this test's loop with small store files; ``overrides`` are broker.conf keys."""
    small = {
        "brokerName": "broker-a",
        "mappedFileSizeCommitLog": 1024 * 1024,
        "mappedFileSizeConsumeQueue": 20 * 1000,
        "maxIndexNum": 10000,
        "maxHashSlotNum": 1000,
    }
    return await start_in_loop(tmp_path / "store", **(small | overrides))


class FakeChannel(OfflineChannel):
    """Stands in for a remoting Channel where a test only needs what was sent back."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list = []

    def send(self, cmd):
        self.sent.append(cmd)


async def woken_answers(channel: FakeChannel, count: int = 1, timeout_s: float = 10.0) -> list:
    """Wait for ``count`` answers on ``channel``: a pull woken by an arrival is answered at the end of its wake round
    (`broker.pull_wake`, ~2 ms later), a few loop turns do not reach it."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while len(channel.sent) < count and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0)  # (one more turn: a further answer would be seen by the caller's count)
    return channel.sent


class Clock:
    """An injectable wall clock in ms that tests move by hand."""

    def __init__(self, start: int = 1_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


def send_request(
    topic,
    body=b"x",
    *,
    queue_id=0,
    props=None,
    code=RequestCode.SEND_MESSAGE_V2,
    batch=False,
    reconsume_times=None,
    max_reconsume_times=None,
    extra_ext=None,
):
    hdr = SendMessageRequestHeader(
        producer_group="PG",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=encode_properties(props or {}),
        reconsume_times=reconsume_times,
        max_reconsume_times=max_reconsume_times,
        batch=batch,
    )
    ext = (
        encode_header(hdr.to_v2())
        if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
        else encode_header(hdr)
    )
    ext.update(extra_ext or {})
    return RemotingCommand.request(code, ext, body)


def pull_request(group, topic, queue_id, offset, *, sys_flag=0x4 | 0x2, suspend_ms=1000, sub="*", max_nums=32):
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(sys_flag),
        "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
        "subVersion": "0",
        "subscription": sub,
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)
