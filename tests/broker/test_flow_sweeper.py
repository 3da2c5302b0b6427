"""BrokerFastFailure's loop: start delay, beat, on/off switch, survival, and its beat during a stuck append
on a real store (the loop must never block inside an append)."""

from __future__ import annotations

import asyncio

import structlog
from broker_helpers import Clock, FakeChannel

from broker.fast_failure import BrokerFastFailure, SweptQueue
from remoting.command import RemotingCommand
from remoting.executor import RequestExecutor, RequestTask
from store import (
    MessageExtBrokerInner,
    MessageStore,
    MessageStoreConfig,
    PutMessageStatus,
)


def enqueue(
    executor: RequestExecutor, channel: FakeChannel, create_ms: int, *, opaque: int = 1, oneway: bool = False
) -> RequestTask:
    task = RequestTask(channel, RemotingCommand.request(10, {}, opaque=opaque, oneway=oneway), create_ms)
    executor.queue.append(task)
    return task


def sweeper(
    send: RequestExecutor,
    clock,
    *,
    busy=lambda: False,
    enabled=lambda: True,
    on_shed=None,
    interval_s: float = 0.01,
    start_delay_s: float = 0.0,
) -> BrokerFastFailure:
    return BrokerFastFailure(
        send_executor=send,
        queues=[SweptQueue(send, lambda: 200)],
        is_page_cache_busy=busy,
        now_ms=clock,
        enabled=enabled,
        on_shed=on_shed,
        interval_s=interval_s,
        start_delay_s=start_delay_s,
    )


async def beats(ff: BrokerFastFailure, n: int, timeout_s: float = 5.0) -> None:
    """Wait for the end of ``n`` more beats of the sweeper."""
    for _ in range(n):
        await asyncio.wait_for(ff.next_beat(), timeout_s)


async def test_loop_waits_for_its_start_delay_then_ticks_every_interval():
    send = RequestExecutor("send", 1, 100)
    ff = sweeper(send, Clock(), interval_s=0.01, start_delay_s=0.3)
    loop = asyncio.get_running_loop()
    with structlog.testing.capture_logs() as logs:
        t0 = loop.time()
        ff.start()
        try:
            assert await asyncio.wait_for(ff.next_beat(), 5) == 1
            first = loop.time() - t0
            assert first >= 0.3, first  # upstream starts the sweeper 1 s after boot; here 0.3 s
            assert ff.ticks == 1
            t1 = loop.time()
            await beats(ff, 10)
            # ten beats at a 10 ms interval; a generous upper bound for a shared machine
            assert 0.09 <= loop.time() - t1 < 2.0, loop.time() - t1
            assert ff.ticks == ff.beats == 11
        finally:
            await ff.stop()
    started = [e for e in logs if e["event"] == "fast failure sweeper started"]
    assert len(started) == 1 and started[0]["interval_ms"] == 10, started


async def test_a_beat_resolves_every_waiter_and_nothing_waits_once_it_is_done():
    send = RequestExecutor("send", 1, 100)
    ff = sweeper(send, Clock())
    ff.start()
    try:
        got = await asyncio.wait_for(asyncio.gather(ff.next_beat(), ff.next_beat(), ff.next_beat()), 5)
        assert len(set(got)) == 1 and got[0] >= 1  # the same beat ended all three waits
        assert ff._beat_waiters is None  # nobody waits: a beat costs one attribute test
        later = await asyncio.wait_for(ff.next_beat(), 5)
        assert later > got[0]
    finally:
        await ff.stop()


async def test_disabled_sweeper_answers_nothing_and_reads_the_switch_every_tick():
    clock, switch = Clock(), {"on": False}
    send = RequestExecutor("send", 1, 100, now_ms=clock)
    ch = FakeChannel()
    enqueue(send, ch, clock.now - 10_000)
    ff = sweeper(send, clock, enabled=lambda: switch["on"])
    ff.start()
    try:
        await beats(ff, 3)
        assert ch.sent == [] and len(send.queue) == 1 and ff.ticks == 0
        switch["on"] = True  # brokerFastFailureEnable changed by updateBrokerConfig
        await beats(ff, 1)  # the very next beat reads the switch
        assert len(ch.sent) == 1 and ch.sent[0].remark.startswith("[TIMEOUT_CLEAN_QUEUE]")
    finally:
        await ff.stop()


async def test_sweeper_survives_a_failing_busy_check_and_logs_at_most_once_a_second():
    clock = Clock()
    send = RequestExecutor("send", 1, 100, now_ms=clock)

    def broken() -> bool:
        raise RuntimeError("boom")

    ch = FakeChannel()
    enqueue(send, ch, clock.now)
    ff = sweeper(send, clock, busy=broken)
    with structlog.testing.capture_logs() as logs:
        ff.start()
        try:
            await beats(ff, 5)
            assert ff.ticks >= 5  # still beating
        finally:
            await ff.stop()
    assert [e["event"] for e in logs].count("fast failure sweep failed") == 1  # the clock did not move


def test_on_shed_reports_per_queue_and_kind():
    clock = Clock()
    send = RequestExecutor("send", 1, 100, now_ms=clock)
    shed = []
    busy = {"v": True}
    ff = sweeper(send, clock, busy=lambda: busy["v"], on_shed=lambda q, k, n: shed.append((q, k, n)))
    ch = FakeChannel()
    for i in range(2):
        enqueue(send, ch, clock.now, opaque=i)
    assert ff.clean_expired_request() == 2
    busy["v"] = False
    for i in range(3):
        enqueue(send, ch, clock.now, opaque=10 + i)
    clock.now += 200
    assert ff.clean_expired_request() == 3
    assert shed == [
        ("send", "PCBUSY_CLEAN_QUEUE", 1),
        ("send", "PCBUSY_CLEAN_QUEUE", 1),
        ("send", "TIMEOUT_CLEAN_QUEUE", 3),
    ]
    assert send.expired == 5 and ch.finished == 5


def test_a_tick_looks_only_at_heads_that_expired():
    """With a long queue of young requests a tick stops at the first head under its limit."""
    clock = Clock()
    send = RequestExecutor("send", 1, 200_000, now_ms=clock)
    ch = FakeChannel()
    enqueue(send, ch, clock.now - 500, opaque=1)
    for i in range(50_000):
        enqueue(send, ch, clock.now, opaque=2 + i)
    ff = sweeper(send, clock)
    assert ff.clean_expired_request() == 1
    assert len(send.queue) == 50_000 and len(ch.sent) == 1


def _msg(body: bytes) -> MessageExtBrokerInner:
    return MessageExtBrokerInner.create(
        "T",
        body,
        queue_id=0,
        properties={},
        born_timestamp=1_700_000_000_000,
        born_host=("10.0.0.9", 1),
        store_host=("127.0.0.1", 10911),
    )


async def test_sweeper_keeps_its_beat_and_sees_the_lock_age_while_an_append_is_stuck(tmp_path):
    """A real store, an append stalled 600 ms: the sweeper goes on ticking on the same loop, reads the page
    cache busy once the lock is older than osPageCacheBusyTimeOutMills, and answers a queued send with
    [PCBUSY_CLEAN_QUEUE] while the append is still stuck."""
    cfg = MessageStoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=256,
        os_page_cache_busy_timeout_mills=100,
    )
    store = MessageStore(cfg)
    assert await store.load()
    await store.start()
    send = RequestExecutor("send", 1, 100, now_ms=store.now_ms)
    ch = FakeChannel()
    seen_busy: list[int] = []

    def busy() -> bool:
        b = store.is_os_page_cache_busy()
        if b:
            seen_busy.append(store.lock_time_mills())
        return b

    ff = BrokerFastFailure(
        send_executor=send,
        queues=[SweptQueue(send, lambda: 10_000)],
        is_page_cache_busy=busy,
        now_ms=store.now_ms,
        enabled=lambda: True,
        interval_s=0.01,
        start_delay_s=0.0,
    )
    try:
        assert (await store.put_message(_msg(b"warm"))).status == PutMessageStatus.PUT_OK
        ff.start()
        loop = asyncio.get_running_loop()
        t0, ticks0 = loop.time(), ff.ticks
        stuck = asyncio.create_task(store.put_message(_msg(b"stuck"), stall_append_ms=600))
        await asyncio.sleep(0.05)
        enqueue(send, ch, store.now_ms())
        await asyncio.sleep(0.25)
        assert ch.sent and ch.sent[0].remark.startswith("[PCBUSY_CLEAN_QUEUE]"), ch.sent
        assert not stuck.done() and store.lock_time_mills() >= 250
        assert (await stuck).status == PutMessageStatus.PUT_OK
        elapsed = loop.time() - t0
        assert ff.ticks - ticks0 >= elapsed / 0.01 * 0.3, (ff.ticks - ticks0, elapsed)  # never starved
        assert seen_busy and min(seen_busy) > 100, seen_busy  # busy only past osPageCacheBusyTimeOutMills
        assert not store.is_os_page_cache_busy()
    finally:
        await ff.stop()
        await store.shutdown()
