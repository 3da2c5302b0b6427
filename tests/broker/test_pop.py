"""PopService: invisible time, ack, change of invisible duration, revive, DLQ after max attempts, FIFO order.

Runs on an in-process broker (real store, real send processor) with the pop service's clock moved by hand.
"""

from __future__ import annotations

import asyncio

import pytest

from broker.pop import InvalidReceiptHandle, PopRequest, ReceiptHandle
from remoting.codes import ResponseCode
from store.message import decode_records
from tests.broker.broker_helpers import Clock, FakeChannel, pull_request, send_request, start_broker

TOPIC = "PopTopic"


class Channel(FakeChannel):
    def __init__(self):
        super().__init__()
        self.attrs = {}


@pytest.fixture
async def broker(tmp_path):
    controller = await start_broker(tmp_path)
    controller.pop_service.now_ms = Clock()
    yield controller
    await controller.shutdown()


async def send(broker, n, *, queue_id=0, topic=TOPIC, tag=None):
    for i in range(n):
        props = {"TAGS": tag} if tag else {}
        response = await broker.send_processor.process_request(
            Channel(), send_request(topic, f"m{i}".encode(), queue_id=queue_id, props=props)
        )
        assert response.code == ResponseCode.SUCCESS, response.remark


def request(*, n=32, invisible_ms=10_000, fifo=False, max_attempts=17, queues=(0,), matches=lambda m: True):
    return PopRequest(
        group="G",
        topic=TOPIC,
        queue_ids=list(queues),
        max_nums=n,
        invisible_ms=invisible_ms,
        fifo=fifo,
        max_attempts=max_attempts,
        matches=matches,
    )


def bodies(popped):
    return [p.message.body.decode() for p in popped]


async def test_popped_messages_are_invisible_until_their_deadline_then_redelivered(broker):
    await send(broker, 3)
    pop, clock = broker.pop_service, broker.pop_service.now_ms
    first = await pop.pop(request())
    assert bodies(first) == ["m0", "m1", "m2"] and {p.attempt for p in first} == {1}
    assert await pop.pop(request()) == []
    pop.ack("G", TOPIC, first[1].receipt_handle)
    clock.now += 10_001
    again = await pop.pop(request())
    assert bodies(again) == ["m0", "m2"] and {p.attempt for p in again} == {2}
    # the handles of the first delivery went stale with the redelivery
    with pytest.raises(InvalidReceiptHandle, match="stale"):
        pop.ack("G", TOPIC, first[0].receipt_handle)


async def test_ack_commits_the_lowest_unacknowledged_offset(broker):
    await send(broker, 3)
    pop = broker.pop_service
    popped = await pop.pop(request())
    pop.ack("G", TOPIC, popped[2].receipt_handle)
    assert broker.consumer_offset_manager.query_offset("G", TOPIC, 0) == 0
    pop.ack("G", TOPIC, popped[0].receipt_handle)
    assert broker.consumer_offset_manager.query_offset("G", TOPIC, 0) == 1
    pop.ack("G", TOPIC, popped[1].receipt_handle)
    assert broker.consumer_offset_manager.query_offset("G", TOPIC, 0) == 3
    with pytest.raises(InvalidReceiptHandle, match="already acknowledged"):
        pop.ack("G", TOPIC, popped[1].receipt_handle)


async def test_change_invisible_duration_moves_the_deadline_and_replaces_the_handle(broker):
    await send(broker, 1)
    pop, clock = broker.pop_service, broker.pop_service.now_ms
    (p,) = await pop.pop(request(invisible_ms=10_000))
    new_handle = pop.change_invisible_time("G", TOPIC, p.receipt_handle, 60_000)
    clock.now += 30_000
    assert await pop.pop(request()) == []
    with pytest.raises(InvalidReceiptHandle):
        pop.ack("G", TOPIC, p.receipt_handle)
    clock.now += 30_001
    (again,) = await pop.pop(request())
    assert again.attempt == 2
    with pytest.raises(InvalidReceiptHandle):
        pop.ack("G", TOPIC, new_handle)
    pop.ack("G", TOPIC, again.receipt_handle)


async def test_an_earlier_deadline_wakes_a_parked_receive(broker):
    """A nack (change of invisible duration to the retry backoff) moves a deadline forward: a receive parked
    until the old one must wake, pop nothing yet and park again until the new one."""
    await send(broker, 1)
    pop = broker.pop_service
    (p,) = await pop.pop(request(invisible_ms=60_000))
    parked = asyncio.ensure_future(pop.wait("G", TOPIC, 5_000))
    await asyncio.sleep(0)
    handle = pop.change_invisible_time("G", TOPIC, p.receipt_handle, 90_000)  # later: nothing to wake for
    await asyncio.sleep(0.01)
    assert not parked.done()
    pop.change_invisible_time("G", TOPIC, handle, 1_000)
    await asyncio.wait_for(parked, 1.0)
    assert pop._waiters == {}


async def test_after_max_attempts_the_revive_moves_the_message_to_the_dlq(broker):
    await send(broker, 1)
    pop, clock = broker.pop_service, broker.pop_service.now_ms
    for attempt in (1, 2, 3):
        (p,) = await pop.pop(request(max_attempts=3))
        assert p.attempt == attempt
        clock.now += 10_001
    assert await pop.pop(request(max_attempts=3)) == []
    assert pop.dead_lettered == 1
    assert broker.consumer_offset_manager.query_offset("G", TOPIC, 0) == 1
    response = await broker.pull_processor.process_request(Channel(), pull_request("D", "%DLQ%G", 0, 0))
    assert response.code == ResponseCode.SUCCESS
    (dead,) = decode_records(response.body)
    assert dead.body == b"m0" and dead.properties["RETRY_TOPIC"] == TOPIC


async def test_fifo_queue_hands_out_nothing_behind_an_invisible_message(broker):
    await send(broker, 3)
    pop, clock = broker.pop_service, broker.pop_service.now_ms
    first = await pop.pop(request(n=1, fifo=True))
    assert bodies(first) == ["m0"]
    assert await pop.pop(request(fifo=True)) == []
    clock.now += 10_001  # not acked: m0 comes back first, alone
    again = await pop.pop(request(fifo=True))
    assert bodies(again) == ["m0"] and again[0].attempt == 2
    pop.ack("G", TOPIC, again[0].receipt_handle)
    assert bodies(await pop.pop(request(fifo=True))) == ["m1", "m2"]


async def test_filtered_messages_are_skipped_and_count_as_consumed(broker):
    await send(broker, 2, tag="a")
    await send(broker, 2, tag="b")
    popped = await broker.pop_service.pop(request(matches=lambda m: m.properties.get("TAGS") == "b"))
    assert [p.message.properties["TAGS"] for p in popped] == ["b", "b"]


@pytest.mark.parametrize("text", ["", "x", "p1 a b c d", "p1 1 2 3", "p2 0 0 0 0"])
def test_a_foreign_receipt_handle_is_refused_with_a_clear_error(text):
    with pytest.raises(InvalidReceiptHandle, match="receipt handle"):
        ReceiptHandle.decode(text)
