"""The fast-failure sweeper, driven tick by tick with an injected clock."""

from __future__ import annotations

from broker_helpers import Clock, FakeChannel

from broker.fast_failure import BrokerFastFailure, SweptQueue
from remoting.command import RemotingCommand
from remoting.executor import RequestExecutor, RequestTask


def make(clock, busy=lambda: False):
    send = RequestExecutor("send", 1, 100, now_ms=clock)
    pull = RequestExecutor("pull", 1, 100, now_ms=clock)
    sweeper = BrokerFastFailure(
        send_executor=send,
        queues=[SweptQueue(send, lambda: 200), SweptQueue(pull, lambda: 5000)],
        is_page_cache_busy=busy,
        now_ms=clock,
        enabled=lambda: True,
    )
    return send, pull, sweeper


def enqueue(executor, channel, clock, *, oneway=False, code=10, opaque=1):
    req = RemotingCommand.request(code, {}, opaque=opaque, oneway=oneway)
    task = RequestTask(channel, req, clock())
    executor.queue.append(task)
    return task


def test_timeout_clean_queue_text_and_order():
    clock = Clock()
    send, pull, sweeper = make(clock)
    ch = FakeChannel()
    enqueue(send, ch, clock, opaque=1)
    clock.now += 50
    enqueue(send, ch, clock, opaque=2)
    clock.now += 160  # first waited 210 ms, second 160 ms
    assert sweeper.clean_expired_request() == 1
    assert len(ch.sent) == 1
    resp = ch.sent[0]
    assert resp.code == 2 and resp.opaque == 1 and resp.is_response
    assert resp.remark == (
        "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 210ms, size of queue: 1"
    )
    assert send.expired == 1 and len(send.queue) == 1
    clock.now += 40
    assert sweeper.clean_expired_request() == 1
    assert ch.sent[1].opaque == 2


def test_each_queue_has_its_own_limit():
    clock = Clock()
    send, pull, sweeper = make(clock)
    ch = FakeChannel()
    enqueue(pull, ch, clock, code=11)
    clock.now += 4999
    assert sweeper.clean_expired_request() == 0
    clock.now += 1
    assert sweeper.clean_expired_request() == 1
    assert ch.sent[0].remark.startswith("[TIMEOUT_CLEAN_QUEUE]") and "period in queue: 5000ms" in ch.sent[0].remark


def test_page_cache_busy_drains_send_queue_with_pcbusy():
    clock = Clock()
    busy = {"v": True}
    send, pull, sweeper = make(clock, busy=lambda: busy["v"])
    ch = FakeChannel()
    for i in range(3):
        enqueue(send, ch, clock, opaque=i)
    clock.now += 7
    assert sweeper.clean_expired_request() == 3
    assert [r.remark for r in ch.sent] == [
        "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 7ms, size of queue: 2",
        "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 7ms, size of queue: 1",
        "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 7ms, size of queue: 0",
    ]
    busy["v"] = False
    enqueue(send, ch, clock)
    assert sweeper.clean_expired_request() == 0


def test_oneway_requests_are_never_answered():
    clock = Clock()
    send, pull, sweeper = make(clock)
    ch = FakeChannel()
    enqueue(send, ch, clock, oneway=True)
    clock.now += 1000
    assert sweeper.clean_expired_request() == 1
    assert ch.sent == [] and ch.finished == 1


def test_stopped_tasks_are_skipped():
    clock = Clock()
    send, pull, sweeper = make(clock)
    ch = FakeChannel()
    task = enqueue(send, ch, clock)
    task.stopped = True
    clock.now += 1000
    assert sweeper.clean_expired_request() == 0 and ch.sent == [] and not send.queue
