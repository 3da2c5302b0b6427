"""POP state across a broker restart (popCheckpoint.json): acks stay acknowledged, attempts go on, in-flight
messages stay invisible until their deadline, and receipt handles issued before the restart still work."""

from __future__ import annotations

import json

import pytest

from broker.pop import PopRequest
from remoting.codes import ResponseCode
from tests.broker.broker_helpers import Clock, FakeChannel, send_request, start_broker

TOPIC = "PopTopic"


class Channel(FakeChannel):
    def __init__(self):
        super().__init__()
        self.attrs = {}


def request(*, n=32, invisible_ms=10_000):
    return PopRequest(
        group="G",
        topic=TOPIC,
        queue_ids=[0],
        max_nums=n,
        invisible_ms=invisible_ms,
        fifo=False,
        max_attempts=17,
        matches=lambda m: True,
    )


def bodies(popped):
    return [p.message.body.decode() for p in popped]


async def restart(broker, tmp_path, clock):
    await broker.shutdown()
    again = await start_broker(tmp_path)
    again.pop_service.now_ms = clock
    return again


@pytest.fixture
async def broker(tmp_path):
    controller = await start_broker(tmp_path)
    controller.pop_service.now_ms = Clock()
    holder = {"broker": controller}
    yield holder
    await holder["broker"].shutdown()


async def test_acks_attempts_and_deadlines_survive_a_restart(broker, tmp_path):
    b = broker["broker"]
    clock = b.pop_service.now_ms
    for i in range(4):
        response = await b.send_processor.process_request(Channel(), send_request(TOPIC, f"m{i}".encode()))
        assert response.code == ResponseCode.SUCCESS, response.remark
    first = await b.pop_service.pop(request())
    assert bodies(first) == ["m0", "m1", "m2", "m3"]
    b.pop_service.ack("G", TOPIC, first[1].receipt_handle)
    b.pop_service.ack("G", TOPIC, first[3].receipt_handle)
    clock.now += 10_001
    second = await b.pop_service.pop(request(invisible_ms=5_000))  # m0, m2 again: attempt 2
    assert bodies(second) == ["m0", "m2"] and {p.attempt for p in second} == {2}

    b = broker["broker"] = await restart(b, tmp_path, clock)
    saved = json.loads((tmp_path / "store" / "config" / "popCheckpoint.json").read_text())
    assert {o for q in saved["queues"] for o, *_ in q["inFlight"]} == {0, 2}
    assert await b.pop_service.pop(request()) == []  # still invisible, acked ones not back
    b.pop_service.ack("G", TOPIC, second[0].receipt_handle)  # a handle from before the restart
    clock.now += 5_001
    third = await b.pop_service.pop(request())
    assert bodies(third) == ["m2"] and third[0].attempt == 3  # the count went on
    b.pop_service.ack("G", TOPIC, third[0].receipt_handle)
    assert b.consumer_offset_manager.query_offset("G", TOPIC, 0) == 4
