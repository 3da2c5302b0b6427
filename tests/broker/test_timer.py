"""Exact delivery times through rmq_sys_wheel_timer against the real store, with an injected clock:
due time, order, the send-side rewrite, restarts and a crash in the middle of a delivery burst."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from store_rig import StoreRig, opened

import broker.timer as timer_module
from broker.timer import (
    TIMER_TOPIC,
    TimerMessageService,
    TimerPropertyError,
    deliver_ms_of,
    park,
)
from store import (
    MessageExtBrokerInner,
    MessageStore,
    decode_records,
)
from tests.starvation import Starvation

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


def _timed(topic: str, body: bytes, deliver_ms: int, now_ms: int, queue_id: int = 0) -> MessageExtBrokerInner:
    """A message as the send processor stores it: rewritten by ``park``."""
    props = {"KEYS": body.decode(), "TAGS": "TagA", "TIMER_DELIVER_MS": str(deliver_ms)}
    parked_topic, parked_qid = park(props, topic, queue_id, now_ms)
    return MessageExtBrokerInner.create(
        parked_topic,
        body,
        queue_id=parked_qid,
        properties=props,
        born_host=("10.0.0.9", 5000),
        store_host=("127.0.0.1", 10911),
    )


class Rig(StoreRig):
    """A store and a timer service on it, on a clock the test moves."""

    def __init__(self, root) -> None:
        super().__init__(root)
        self.clock = Clock()

    def make_service(self, store: MessageStore) -> TimerMessageService:
        return TimerMessageService(store=store, store_path_root_dir=str(self.root), now_ms=self.clock)

    def on_arrival(self, topic: str, queue_id: int) -> None:
        if topic == TIMER_TOPIC:
            self.service.on_message_arriving()

    async def tick(self, to_ms: int) -> None:
        """Moves the clock and waits until the service has looked (a real broker's clock moves on its own).

        A condition, not a fixed sleep: on a loaded machine the service may not run within any fixed time,
        and the assertions after a tick must see what it did at `to_ms`, all of it and nothing more."""
        self.clock.ms = to_ms
        self.service.on_message_arriving()
        await self.settled()

    def is_settled(self) -> bool:
        """The service has run since the last wake-up, read every parked entry, holds nothing due at the clock's
        time and is not inside a put, and the store has dispatched all it wrote: its deliveries for this clock
        time are all visible. A service that never delivers a due entry never settles (the wait times out)."""
        svc, store = self.service, self.store
        return (
            not svc._wakeup.is_set()
            and svc._uncounted_from is None
            and svc._next_read >= store.get_max_offset_in_queue(TIMER_TOPIC, 0)
            and (not svc._heap or svc._heap[0][0] > self.clock.ms)
            and store.dispatch_behind_bytes() == 0
        )

    async def settled(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.is_settled():
            assert time.monotonic() < deadline, f"timer service busy at {self.clock.ms}: heap {self.service._heap[:3]}"
            await asyncio.sleep(0.005)


@pytest.fixture
async def rig(tmp_path):
    async with opened(Rig(tmp_path / "store")) as r:
        yield r


def test_park_rewrites_only_a_future_delivery_time():
    props = {"TIMER_DELAY_SEC": "3"}
    assert park(props, "T", 2, T0) == (TIMER_TOPIC, 0)
    assert props["TIMER_OUT_MS"] == str(T0 + 3000) and props["REAL_TOPIC"] == "T" and props["REAL_QID"] == "2"
    assert deliver_ms_of({"TIMER_DELAY_MS": "1500"}, T0) == T0 + 1500
    assert deliver_ms_of({"TIMER_DELIVER_MS": str(T0 + 7), "TIMER_DELAY_SEC": "9"}, T0) == T0 + 7
    past = {"TIMER_DELIVER_MS": str(T0 - 1)}
    assert park(past, "T", 1, T0) == ("T", 1) and "REAL_TOPIC" not in past
    leveled = {"DELAY": "2", "TIMER_DELAY_SEC": "3"}
    assert park(leveled, "T", 1, T0) == ("T", 1) and "TIMER_DELAY_SEC" not in leveled  # a level wins
    with pytest.raises(TimerPropertyError, match="integer"):
        park({"TIMER_DELIVER_MS": "soon"}, "T", 0, T0)
    with pytest.raises(TimerPropertyError, match="timerMaxDelaySec"):
        park({"TIMER_DELAY_SEC": str(4 * 24 * 3600)}, "T", 0, T0)


async def test_each_message_is_delivered_at_its_own_time_in_time_order(rig):
    now = rig.clock.ms
    # sent in one order, due in another; 3 s is not a delay level's time
    for body, at in (("c", 3000), ("a", 1000), ("b", 2500), ("d", 3001)):
        put = await rig.store.put_message(_timed("T", body.encode(), now + at, now, queue_id=1))
        assert put.status.name == "PUT_OK"
    await rig.tick(now + 999)
    assert rig.bodies("T", 1) == []
    await rig.tick(now + 1000)
    assert rig.bodies("T", 1) == ["a"]
    await rig.tick(now + 2999)
    assert rig.bodies("T", 1) == ["a", "b"]
    await rig.tick(now + 3000)
    assert rig.bodies("T", 1) == ["a", "b", "c"]
    await rig.tick(now + 10_000)
    assert rig.bodies("T", 1) == ["a", "b", "c", "d"]
    delivered = decode_records(b"".join(rig.store.get_message("g", "T", 1, 0, 32, None).buffers))
    assert delivered[0].properties["TIMER_OUT_MS"] == str(now + 1000) and delivered[0].queue_id == 1
    assert rig.service.delivered == 4 and rig.service.delivered_below == 4


async def test_a_restart_neither_loses_nor_repeats(rig):
    now = rig.clock.ms
    for i in range(10):
        await rig.store.put_message(_timed("T", f"m{i}".encode(), now + 100 + (i % 2) * 5000 + i, now))
    await rig.tick(now + 1000)  # the even ones are due
    assert sorted(rig.bodies("T")) == [f"m{i}" for i in range(0, 10, 2)]
    await rig.close()
    saved = json.loads((rig.root / "config" / "timerOffset.json").read_text())
    assert saved["deliveredBelow"] == 1 and saved["deliveredAhead"] == [[2, 3], [4, 5], [6, 7], [8, 9]]
    await rig.open()
    await rig.tick(rig.clock.ms)
    assert len(rig.bodies("T")) == 5  # nothing repeated, the odd ones still parked
    await rig.tick(now + 4999)
    assert len(rig.bodies("T")) == 5
    await rig.tick(now + 6000)
    got = rig.bodies("T")
    assert got[:5] == [f"m{i}" for i in range(0, 10, 2)] and got[5:] == [f"m{i}" for i in range(1, 10, 2)]


async def test_a_crash_mid_burst_neither_loses_nor_repeats(rig, monkeypatch):
    """timerOffset.json stays as start() wrote it while a burst is delivered; the broker dies part way:
    on start the copies already in the CommitLog are found and only the rest delivered."""

    def disk_gone(*_args, **_kw):
        raise OSError("no space left on device")

    now = rig.clock.ms
    n = 1500
    for i in range(n):
        await rig.store.put_message(_timed("T", f"{i}".encode(), now + 1000 + (i * 7919) % n, now))
    monkeypatch.setattr(timer_module, "write_atomically", disk_gone)
    rig.clock.ms = now + 10_000
    rig.service.on_message_arriving()
    await rig.wait_for("T", n // 4)
    for task in (rig.service._task, rig.service._persister):
        task.cancel()
    await asyncio.gather(rig.service._task, rig.service._persister, return_exceptions=True)
    before = len(rig.bodies("T"))
    assert n // 4 <= before < n, before
    await rig.store.shutdown()
    monkeypatch.undo()
    await rig.open()
    got = await rig.wait_for("T", n)
    await asyncio.sleep(0.3)  # room for a duplicate to show up
    got = rig.bodies("T")
    assert sorted(got, key=int) == [str(i) for i in range(n)], len(got)
    # in due order: due = 1000 + (i * 7919) % n, all distinct
    assert [int(b) * 7919 % n for b in got] == list(range(n))


async def test_a_remoting_send_with_timer_properties_is_parked_then_delivered(tmp_path):
    """SEND_MESSAGE through the send processor: TIMER_DELAY_MS parks it, the broker's timer delivers it at
    that time; a value that is not a number is MESSAGE_ILLEGAL with a clear remark."""
    from remoting.codes import ResponseCode
    from tests.broker.broker_helpers import FakeChannel, send_request, start_broker

    class Channel(FakeChannel):
        def __init__(self):
            super().__init__()
            self.attrs = {}

    broker = await start_broker(tmp_path)
    try:
        starved = Starvation(os.getpid())  # the broker runs in this process
        sent = time.time()
        response = await broker.send_processor.process_request(
            Channel(), send_request("TimedTopic", b"t", props={"TIMER_DELAY_MS": "600"})
        )
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert broker.store.get_max_offset_in_queue(TIMER_TOPIC, 0) == 1
        assert broker.store.get_max_offset_in_queue("TimedTopic", 0) == 0
        deadline = time.monotonic() + 5
        while broker.store.get_max_offset_in_queue("TimedTopic", 0) == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        # not early, and late by no more than the old 0.9 s allowance plus the time the kernel kept us off the CPU
        assert 0.55 <= time.time() - sent < 1.5 + starved.ms / 1000, (time.time() - sent, starved.ms)
        bad = await broker.send_processor.process_request(
            Channel(), send_request("TimedTopic", b"t", props={"TIMER_DELIVER_MS": "tomorrow"})
        )
        assert bad.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DELIVER_MS must be an integer" in bad.remark
    finally:
        await broker.shutdown()
