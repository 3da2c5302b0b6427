"""The synchronous processor entry against the coroutine path, on a real broker: the same request dispatched while
its executor can run it now (``answer_now``: the processor's ``process_request_now`` through the metrics wrapper,
no coroutine) and while the executor is paused (queued: a ``RequestTask`` run by a worker, awaiting the wrapper's
and the processor's ``process_request``) gets the same answer, the same metrics cell and the same executor and
channel counts. Without the synchronous entry the first path would call the processor's ``process_request``
(the spy counts it) and the tests fail."""

from __future__ import annotations

import asyncio
import random

from broker_helpers import FakeChannel, pull_request, send_request, start_broker

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand

TOPIC = "SyncT"
GROUP = "SyncG"


def wire(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) for p in cmd.encode())


def cell_counts(broker) -> dict:
    return {key: cell.count for key, cell in broker.metrics.requests.latency.items()}


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


class Spy:
    """Counts the calls of the processor's coroutine entry (the queued path's)."""

    def __init__(self, processor) -> None:
        self.calls = 0
        real = processor.process_request

        async def process_request(channel, request):
            self.calls += 1
            return await real(channel, request)

        processor.process_request = process_request


async def run_both(broker, executor, make_request) -> tuple[tuple, tuple]:
    """The request through the synchronous entry, then (made again) through the queue: (answer bytes or None,
    metrics delta, completed delta, in flight after) for each."""
    outcomes = []
    for queued in (False, True):
        ch = FakeChannel()
        before, completed = cell_counts(broker), executor.completed
        if queued:
            executor.pause(10)
        broker.server.dispatch(ch, make_request())
        if queued:
            assert executor.size == 1 and ch.sent == []  # it waits in the queue, where the sweep sees it
            executor.resume()
        for _ in range(200):
            if executor.completed > completed:
                break
            await asyncio.sleep(0.001)
        answer = wire(ch.sent[0]) if ch.sent else None
        outcomes.append((answer, delta(before, cell_counts(broker)), executor.completed - completed, ch.in_flight))
    return outcomes[0], outcomes[1]


async def test_pulls_get_the_same_answers_and_counts_through_either_entry(broker) -> None:
    for i in range(40):
        await broker.send_processor.process_request(FakeChannel(), send_request(TOPIC, b"m%d" % i, queue_id=i % 2))
    pull = broker.pull_processor
    spy = Spy(pull)
    executor = broker.executors["pull"]
    rng = random.Random(15)
    cases = 0
    for _ in range(60):
        group = rng.choice([GROUP, GROUP, "NoSuchGroup!"])
        topic = rng.choice([TOPIC, TOPIC, TOPIC, "NoSuchTopic"])
        queue_id = rng.choice([0, 1, 1, 7])
        offset = rng.choice([0, 3, 19, 20, 25, 1_000])
        max_nums = rng.choice([1, 2, 32])
        sub = rng.choice(["*", "*", "tagA || tagB"])
        sys_flag = rng.choice([0x2, 0x0, 0x1 | 0x2])  # no suspend: every pull is answered at once

        def make(group=group, topic=topic, queue_id=queue_id, offset=offset, max_nums=max_nums, sub=sub, sf=sys_flag):
            req = pull_request(group, topic, queue_id, offset, sys_flag=sf, max_nums=max_nums, sub=sub)
            req.opaque = 77
            return req

        calls = spy.calls
        direct, queued = await run_both(broker, executor, make)
        assert spy.calls == calls + 1  # only the queued one went through the coroutine entry
        assert direct == queued, (group, topic, queue_id, offset, max_nums, sub, sys_flag)
        assert direct[0] is not None and direct[2] == 1 and direct[3] == 0
        cases += 1
    # a pull whose header cannot be decoded: SYSTEM_ERROR from either entry, counted "process_request_failed"
    direct, queued = await run_both(
        broker, executor, lambda: RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": TOPIC}, opaque=5)
    )
    assert direct == queued
    key = (int(RequestCode.PULL_MESSAGE), int(ResponseCode.SYSTEM_ERROR), False, "process_request_failed")
    assert direct[1] == {key: 1}
    assert cases == 60


async def test_sends_get_the_same_answers_and_counts_through_either_entry(broker) -> None:
    executor = broker.executors["send"]
    spy = Spy(broker.send_processor)

    def comparable(outcome):
        answer, cells, completed, in_flight = outcome
        if answer is None:
            return outcome
        cmd = RemotingCommand.decode(memoryview(answer)[4:])
        ext = {k: v for k, v in cmd.ext_fields.items() if k not in ("msgId", "queueOffset")}
        return (cmd.code, cmd.remark, ext), cells, completed, in_flight

    makers = [
        lambda: send_request(TOPIC, b"lone", queue_id=1),
        lambda: send_request("bad topic!", b"x"),  # refused by the processor: SYSTEM_ERROR, counted "success"
        lambda: RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": TOPIC}, b"no header"),  # raises
        lambda: send_request(TOPIC, b"old", code=RequestCode.SEND_MESSAGE),
    ]
    for make in makers:
        calls = spy.calls
        direct, queued = await run_both(broker, executor, make)
        # the send processor has no process_request_now: both entries run its coroutine (the synchronous one up
        # to its first wait, in the wrapper's process_request_now, without the task and wrapper coroutines)
        assert spy.calls == calls + 2
        assert comparable(direct) == comparable(queued)
        assert direct[2] == 1 and direct[3] == 0


async def test_a_long_poll_parked_by_the_synchronous_entry_is_counted_and_answered_on_arrival(broker) -> None:
    await broker.send_processor.process_request(FakeChannel(), send_request(TOPIC, b"first", queue_id=0))
    executor = broker.executors["pull"]
    ch = FakeChannel()
    completed = executor.completed
    before = cell_counts(broker)
    req = pull_request(GROUP, TOPIC, 0, 1, suspend_ms=5000)
    req.opaque = 9
    broker.server.dispatch(ch, req)
    # parked: no answer yet, but the request is done for the executor and the channel, counted as long polling
    assert ch.sent == [] and executor.completed == completed + 1 and executor.active == 0 and ch.in_flight == 0
    assert delta(before, cell_counts(broker)) == {(int(RequestCode.PULL_MESSAGE), None, True, "success"): 1}
    await broker.send_processor.process_request(FakeChannel(), send_request(TOPIC, b"second", queue_id=0))
    for _ in range(500):
        if ch.sent:
            break
        await asyncio.sleep(0.01)
    [answer] = ch.sent
    assert answer.opaque == 9 and answer.code == ResponseCode.SUCCESS


async def test_sync_flush_sends_wait_as_a_pending_rest_and_are_answered_as_through_the_queue(tmp_path) -> None:
    """Under SYNC_FLUSH a send waits for its flush: the synchronous entry returns its Pending rest, which holds
    the send worker until the answer is written; answers and counts as through the queue."""
    broker = await start_broker(tmp_path, flushDiskType="SYNC_FLUSH")
    try:
        executor = broker.executors["send"]
        ch = FakeChannel()
        completed = executor.completed
        broker.server.dispatch(ch, send_request(TOPIC, b"flushed", queue_id=0))
        assert ch.sent == [] and executor.active == 1 and ch.in_flight == 1  # waiting for its flush, worker lent
        for _ in range(500):
            if ch.sent:
                break
            await asyncio.sleep(0.01)
        assert ch.sent[0].code == ResponseCode.SUCCESS
        assert (executor.active, executor.completed - completed, ch.in_flight) == (0, 1, 0)
        direct, queued = await run_both(broker, executor, lambda: send_request(TOPIC, b"again", queue_id=0))
        assert direct[1:] == queued[1:] and direct[2] == 1
        assert RemotingCommand.decode(memoryview(direct[0])[4:]).code == ResponseCode.SUCCESS
    finally:
        await broker.shutdown()
