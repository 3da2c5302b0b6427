"""Delay levels through SCHEDULE_TOPIC_XXXX against the real store: due times, order, restore, restarts."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import structlog
from store_rig import StoreRig, opened

import broker.schedule as schedule_module
from broker.filter import TagMessageFilter
from broker.heartbeat import build_subscription
from broker.schedule import ScheduleMessageService
from broker.topic import SCHEDULE_TOPIC
from store import (
    MessageExtBrokerInner,
    MessageStore,
    PutMessageResult,
    PutMessageStatus,
)

LEVELS_MS = [200, 400, 600]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _msg(topic: str, body: bytes, delay: int | None, queue_id: int = 0, tags: str | None = "TagA"):
    props = {"KEYS": body.decode()}
    if tags:
        props["TAGS"] = tags
    if delay is not None:
        props["DELAY"] = str(delay)
    return MessageExtBrokerInner.create(
        topic, body, queue_id=queue_id, properties=props, born_host=("10.0.0.9", 5000), store_host=("127.0.0.1", 10911)
    )


class Rig(StoreRig):
    """A store and a schedule service on it."""

    def __init__(self, root, now_ms=wall_ms) -> None:
        super().__init__(root, message_delay_level="1s 2s 3s")
        self.now_ms = now_ms

    def make_service(self, store: MessageStore) -> ScheduleMessageService:
        return ScheduleMessageService(
            store=store, delay_levels_ms=LEVELS_MS, store_path_root_dir=str(self.root), now_ms=self.now_ms
        )

    def on_arrival(self, topic: str, queue_id: int) -> None:
        if topic == SCHEDULE_TOPIC:
            self.service.on_message_arriving(queue_id)


@pytest.fixture
async def rig(tmp_path):
    async with opened(Rig(tmp_path / "store")) as r:
        yield r


async def test_delayed_message_is_parked_then_restored_on_time(rig):
    put = await rig.store.put_message(_msg("T", b"m1", 2, queue_id=3))
    assert put.is_ok()
    sent_ms = put.append_result.store_timestamp
    await asyncio.sleep(0.05)
    assert rig.messages("T", 3) == []
    parked = rig.messages(SCHEDULE_TOPIC, 1)
    assert [m.properties["REAL_TOPIC"] for m in parked] == ["T"] and parked[0].properties["REAL_QID"] == "3"
    got = await rig.wait_for("T", 1, queue_id=3)
    arrived_ms = wall_ms()
    m = got[0]
    assert "DELAY" not in m.properties and m.properties["KEYS"] == "m1" and m.queue_id == 3
    assert m.store_timestamp - sent_ms >= LEVELS_MS[1]
    # measured end to end (store time of the delivered copy vs due time): well within 100 ms normally;
    # the bound is generous for a loaded 2-core machine, the service's own figure is tighter
    assert m.store_timestamp - (sent_ms + LEVELS_MS[1]) < 250, m.store_timestamp - sent_ms
    assert rig.service.stats.max_lateness_ms < 100
    assert arrived_ms - sent_ms < LEVELS_MS[1] + 500
    # the delivered copy is found by a tag subscription: its consume-queue tag code is its TAGS hash again
    assert len(rig.messages("T", 3, TagMessageFilter(build_subscription("T", "TagA")))) == 1


async def test_levels_run_independently_and_keep_order(rig):
    t0 = wall_ms()
    for i, level in enumerate([3, 1, 2, 1, 3, 2, 1]):
        await rig.store.put_message(_msg("T", f"{level}-{i}".encode(), level))
    got = await rig.wait_for("T", 7)
    order = [m.body.decode() for m in got]
    assert order == ["1-1", "1-3", "1-6", "2-2", "2-5", "3-0", "3-4"], order
    for m in got:
        level = int(m.body.decode()[0])
        assert m.store_timestamp - t0 >= LEVELS_MS[level - 1]
    assert rig.service.delivered == 7


async def test_levels_above_the_maximum_are_clamped(rig):
    await rig.store.put_message(_msg("T", b"big", 99))
    await asyncio.sleep(0.05)
    assert len(rig.messages(SCHEDULE_TOPIC, len(LEVELS_MS) - 1)) == 1
    await rig.wait_for("T", 1)


async def test_an_arrival_wakes_an_idle_level_at_once(rig):
    await asyncio.sleep(0.2)  # let the levels go idle (they then poll every second)
    put = await rig.store.put_message(_msg("T", b"late", 1))
    got = await rig.wait_for("T", 1)
    assert got[0].store_timestamp - put.append_result.store_timestamp < LEVELS_MS[0] + 250


async def test_restart_neither_loses_nor_repeats(rig):
    for i in range(3):
        await rig.store.put_message(_msg("T", f"fast{i}".encode(), 1))
    for i in range(3):
        await rig.store.put_message(_msg("T", f"slow{i}".encode(), 3))
    await rig.wait_for("T", 3)
    await rig.restart()  # the slow level is still pending
    saved = json.loads((rig.root / "config" / "delayOffset.json").read_text())
    assert saved["offsetTable"]["1"] == 3
    got = await rig.wait_for("T", 6)
    await asyncio.sleep(0.3)  # room for a duplicate to show up
    bodies = [m.body.decode() for m in rig.messages("T")]
    assert sorted(bodies) == sorted([f"fast{i}" for i in range(3)] + [f"slow{i}" for i in range(3)]), bodies
    assert len(got) == 6


async def test_stop_during_a_burst_finishes_the_delivery_in_hand(rig):
    for i in range(40):
        await rig.store.put_message(_msg("T", f"b{i}".encode(), 1))
    # stop as the burst falls due, then restart: every message exactly once
    await asyncio.sleep(LEVELS_MS[0] / 1000)
    await rig.restart()
    await rig.wait_for("T", 40)
    await asyncio.sleep(0.3)
    bodies = [m.body.decode() for m in rig.messages("T")]
    assert sorted(bodies) == sorted(f"b{i}" for i in range(40))


async def test_offsets_beyond_the_queue_are_corrected_on_start(tmp_path):
    root = tmp_path / "store"
    (root / "config").mkdir(parents=True)
    (root / "config" / "delayOffset.json").write_text('{"offsetTable":{1:57,2:0}}')  # fastjson's bare keys
    r = await Rig(root).open()
    try:
        assert r.service.offset_table[1] == 0
        await r.store.put_message(_msg("T", b"after", 1))
        await r.wait_for("T", 1)
        for _ in range(100):  # the copy can be visible a moment before the service records its progress
            if r.service.offset_table.get(1) == 1:
                break
            await asyncio.sleep(0.01)
        info = r.service.runtime_info()
        assert info["scheduleMessageOffset_1"] == "1,1" and "scheduleMessageMaxLatenessMs" in info
    finally:
        await r.close()


# --------------------------------------------------------------------------------------- bursts


class ShiftedClock:
    """The service's clock: the wall clock moved by `shift_ms` (the store keeps the real one)."""

    def __init__(self) -> None:
        self.shift_ms = 0

    def __call__(self) -> int:
        return wall_ms() + self.shift_ms


def _count_delivery_appends(store: MessageStore) -> list[int]:
    """Wrap the store's puts on the instance: calls[0] counts the appends of messages outside the schedule
    topic (the deliveries), calls[1] the messages they carried."""
    calls = [0, 0]
    put_one, put_many = store.put_message, store.put_messages

    async def put_message(msg, **kw):
        if msg.topic != SCHEDULE_TOPIC and "DELAY" not in msg.properties:
            calls[0] += 1
            calls[1] += 1
        return await put_one(msg, **kw)

    async def put_messages(msgs, **kw):
        calls[0] += 1
        calls[1] += len(msgs)
        return await put_many(msgs, **kw)

    store.put_message, store.put_messages = put_message, put_messages
    return calls


def _bodies_by_queue(rig: Rig, topic: str, queues: int) -> dict[int, list[str]]:
    return {q: [m.body.decode() for m in rig.messages(topic, q)] for q in range(queues)}


async def _wait_total(rig: Rig, topic: str, queues: int, n: int, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(rig.store.get_max_offset_in_queue(topic, q) for q in range(queues)) < n:
        assert time.monotonic() < deadline, _bodies_by_queue(rig, topic, queues)
        await asyncio.sleep(0.01)


async def test_a_due_burst_goes_out_in_few_appends_and_in_order_per_queue(tmp_path):
    """2000 messages fall due at once: the level puts them in batches (one append per real queue per
    round), not one append per message, and each real queue gets its messages in level order."""
    clock = ShiftedClock()
    clock.shift_ms = -60_000  # nothing is due while the burst is parked
    rig = await Rig(tmp_path / "store", now_ms=clock).open()
    try:
        n, queues = 2000, 4
        for i in range(n):
            assert (await rig.store.put_message(_msg("T", f"{i}".encode(), 1, queue_id=i % queues))).is_ok()
        await asyncio.sleep(0.05)
        assert sum(rig.store.get_max_offset_in_queue("T", q) for q in range(queues)) == 0
        calls = _count_delivery_appends(rig.store)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.get_running_loop().create_task(ticker())
        clock.shift_ms = 60_000  # the whole burst is due now
        await _wait_total(rig, "T", queues, n)
        other.cancel()
        assert calls[1] == n
        # one message per append before (2000 appends); a round takes up to BATCH_MAX_MESSAGES (512)
        # entries, one append per real queue: 4 rounds of 4 appends, a few more if the clock splits one
        assert calls[0] <= 40, calls
        assert ticks >= 4, "the level did not yield between rounds"
        got = _bodies_by_queue(rig, "T", queues)
        for q in range(queues):
            assert got[q] == [str(i) for i in range(q, n, queues)], q
        assert rig.service.delivered == n
    finally:
        await rig.close()


async def test_a_crash_neither_loses_nor_repeats_deliveries(rig, monkeypatch):
    """The broker dies in the middle of a burst, long after delayOffset.json was last written: on start
    the service finds what it delivered beyond the written offsets and delivers only the rest."""

    def disk_gone(*_args, **_kw):
        raise OSError("no space left on device")

    # from now on delayOffset.json stays as start() left it (offset 0 for every level)
    monkeypatch.setattr(schedule_module, "write_atomically", disk_gone)
    n, queues = 3000, 3
    for i in range(n):
        await rig.store.put_message(_msg("T", f"{i}".encode(), 1, queue_id=i % queues))
    await _wait_total(rig, "T", queues, n // 3)
    # crash: the level stops wherever it is (perhaps in the middle of a round), nothing more is written
    for task in [*rig.service._tasks, rig.service._persister]:
        task.cancel()
    await asyncio.gather(*rig.service._tasks, rig.service._persister, return_exceptions=True)
    before = sum(rig.store.get_max_offset_in_queue("T", q) for q in range(queues))
    assert n // 3 <= before < n, before
    await rig.store.shutdown()
    monkeypatch.undo()
    await rig.open()
    await _wait_total(rig, "T", queues, n)
    await asyncio.sleep(0.3)  # room for a duplicate to show up
    got = _bodies_by_queue(rig, "T", queues)
    for q in range(queues):
        assert got[q] == [str(i) for i in range(q, n, queues)], (q, len(got[q]))
    assert rig.service.offset_table[1] == n


async def test_a_failed_put_is_retried_without_repeating_the_queues_already_delivered(rig):
    """A round puts queue A's messages, then B's put fails: the retry delivers B's and not A's again."""
    failures = [1]
    put_many = rig.store.put_messages
    put_one = rig.store.put_message

    async def flaky_many(msgs, **kw):
        if msgs[0].topic == "B" and failures[0]:
            failures[0] -= 1
            return PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY, None, "busy")
        return await put_many(msgs, **kw)

    async def flaky_one(msg, **kw):
        if msg.topic == "B" and failures[0]:
            failures[0] -= 1
            return PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY, None, "busy")
        return await put_one(msg, **kw)

    rig.store.put_messages, rig.store.put_message = flaky_many, flaky_one
    for i in range(60):
        await put_one(_msg("B" if i % 3 == 0 else "A", f"{i}".encode(), 1))
    await rig.wait_for("A", 40)
    await rig.wait_for("B", 20)
    await asyncio.sleep(0.3)
    assert [m.body.decode() for m in rig.messages("A")] == [str(i) for i in range(60) if i % 3]
    assert [m.body.decode() for m in rig.messages("B")] == [str(i) for i in range(0, 60, 3)]
    assert failures == [0]


async def test_the_offsets_file_bounds_what_a_start_after_a_crash_reads(rig, monkeypatch):
    """delayOffset.json holds commitLogOffset: after a clean stop the CommitLog's end (nothing to look
    through on start); while delivering, never far behind the end (written ahead of a put otherwise)."""
    monkeypatch.setattr(schedule_module, "RECOVERY_SCAN_LIMIT", 4096)
    for _i in range(20):
        await rig.store.put_message(_msg("Other", b"x" * 1000, None))  # 20 KB the level did not write
    await rig.store.put_message(_msg("T", b"late", 1))
    written = []
    real_write = schedule_module.write_atomically

    def spy(path, payload):
        written.append(json.loads(payload)["commitLogOffset"])
        real_write(path, payload)

    monkeypatch.setattr(schedule_module, "write_atomically", spy)
    end_before_delivery = rig.store.commit_log.get_max_offset()
    await rig.wait_for("T", 1)
    await rig.service.stop()  # (waits for the write started ahead of the put)
    assert written and written[0] == end_before_delivery, (written, end_before_delivery)
    saved = json.loads((rig.root / "config" / "delayOffset.json").read_text())
    assert saved["commitLogOffset"] == rig.store.commit_log.get_max_offset()
    assert saved["offsetTable"]["1"] == 1
    rig.service.start()  # the fixture's close stops it again


async def test_the_offsets_file_follows_the_commit_log_without_deliveries(tmp_path, monkeypatch):
    monkeypatch.setattr(schedule_module, "RECOVERY_SCAN_LIMIT", 4096)
    monkeypatch.setattr(schedule_module, "STALE_CHECK_S", 0.05)
    rig = await Rig(tmp_path / "store").open()
    try:
        for _ in range(20):
            await rig.store.put_message(_msg("Other", b"x" * 1000, None))  # no delayed message at all
        end = rig.store.commit_log.get_max_offset()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            saved = json.loads((rig.root / "config" / "delayOffset.json").read_text())
            if saved["commitLogOffset"] == end:
                break
            await asyncio.sleep(0.02)
        assert saved["commitLogOffset"] == end, (saved, end)
    finally:
        await rig.close()


async def test_a_slow_offsets_file_write_does_not_hold_a_delivery_back(rig, monkeypatch):
    """The write ahead of a put (commitLogOffset half the limit behind) goes on in the background: an fsync
    that takes a second on a busy disk made every put of a burst wait for it. The file still gets the position
    from before the put."""
    monkeypatch.setattr(schedule_module, "RECOVERY_SCAN_LIMIT", 64 * 1024)
    monkeypatch.setattr(schedule_module, "STALE_CHECK_S", 60.0)  # only the delivery writes the file
    for _i in range(20):  # ~42 KB (the KEYS property repeats the body): past half the limit, within it
        await rig.store.put_message(_msg("Other", b"x" * 1000, None))
    written = []
    real_write = schedule_module.write_atomically

    def slow_write(path, payload):
        time.sleep(1.0)
        written.append(json.loads(payload)["commitLogOffset"])
        real_write(path, payload)

    monkeypatch.setattr(schedule_module, "write_atomically", slow_write)
    put = await rig.store.put_message(_msg("T", b"on-time", 1))
    end_before_delivery = rig.store.commit_log.get_max_offset()
    got = await rig.wait_for("T", 1)
    lateness = got[0].store_timestamp - (put.append_result.store_timestamp + LEVELS_MS[0])
    assert lateness < 500, lateness
    await rig.service.stop()
    assert written and written[0] == end_before_delivery, (written, end_before_delivery)
    rig.service.start()  # the fixture's close stops it again


class SmallRoundsRig(Rig):
    """Rounds of 16 entries, so that one round is small against the test's scan limit."""

    def make_service(self, store: MessageStore) -> ScheduleMessageService:
        return ScheduleMessageService(
            store=store,
            delay_levels_ms=LEVELS_MS,
            store_path_root_dir=str(self.root),
            now_ms=self.now_ms,
            batch_max_messages=16,
        )


async def test_after_a_crash_during_a_slow_offsets_write_recovery_reads_within_the_limit(tmp_path, monkeypatch):
    """Every write of delayOffset.json takes 100 ms and the broker dies in the middle of a burst, the write in
    flight never landing: the start after it reads at most RECOVERY_SCAN_LIMIT of the CommitLog (before, the
    deliveries went on past the limit for as long as the write took), and neither loses nor repeats."""
    limit = 64 * 1024
    monkeypatch.setattr(schedule_module, "RECOVERY_SCAN_LIMIT", limit)
    monkeypatch.setattr(schedule_module, "STALE_CHECK_S", 60.0)
    real_write = schedule_module.write_atomically
    disk = {"slow": False, "crashed": False}

    def write(path, payload):
        if disk["slow"]:
            deadline = time.monotonic() + 0.1
            while time.monotonic() < deadline:
                if disk["crashed"]:
                    raise OSError("the process died during this write")
                time.sleep(0.005)
        if disk["crashed"]:
            raise OSError("the process died during this write")
        real_write(path, payload)

    monkeypatch.setattr(schedule_module, "write_atomically", write)
    clock = ShiftedClock()
    clock.shift_ms = -60_000  # nothing is due while the burst is parked
    rig = await SmallRoundsRig(tmp_path / "store", now_ms=clock).open()
    n, queues = 1500, 3
    try:
        for i in range(n):
            assert (await rig.store.put_message(_msg("T", f"{i:04d}".encode() * 10, 1, queue_id=i % queues))).is_ok()
        parked_end = rig.store.commit_log.get_max_offset()
        assert parked_end > 4 * limit  # the burst's deliveries alone are several limits long
        disk["slow"] = True
        clock.shift_ms = 60_000  # the whole burst is due now
        await _wait_total(rig, "T", queues, n // 2)
        # crash: the levels and writers stop where they are; the write in flight never reaches the disk
        disk["crashed"] = True
        service = rig.service
        tasks = [*service._tasks, service._persister, *([service._early_write] if service._early_write else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        before = sum(rig.store.get_max_offset_in_queue("T", q) for q in range(queues))
        assert n // 2 <= before < n, before
        await rig.store.shutdown()
    except BaseException:
        await rig.close()
        raise
    disk.update(slow=False, crashed=False)
    with structlog.testing.capture_logs() as logs:
        await rig.open()
    try:
        recovery = [e for e in logs if e["event"] == "schedule recovery"]
        assert len(recovery) == 1, logs
        read = recovery[0]["commit_log_to"] - recovery[0]["commit_log_from"]
        assert 0 < read <= limit, (read, limit, recovery[0])
        await _wait_total(rig, "T", queues, n)
        await asyncio.sleep(0.3)  # room for a duplicate to show up
        got = _bodies_by_queue(rig, "T", queues)
        for q in range(queues):
            assert got[q] == [f"{i:04d}" * 10 for i in range(q, n, queues)], (q, len(got[q]))
    finally:
        await rig.close()


async def test_a_round_reads_parked_records_across_commit_log_files(tmp_path):
    """A round reads through one view per CommitLog file: a due burst whose parked records (and the
    deliveries written between them) span several small files goes out whole, in order, once."""
    clock = ShiftedClock()
    clock.shift_ms = -60_000
    rig = Rig(tmp_path / "store", now_ms=clock)
    rig.store_config["mapped_file_size_commit_log"] = 16 * 1024
    await rig.open()
    try:
        n = 300
        for i in range(n):
            body = f"{i}-".encode() + b"x" * (i % 97)  # records of varied sizes: files end at varied places
            assert (await rig.store.put_message(_msg("T", body, 1))).is_ok()
        assert len(rig.store.commit_log.mapped_file_queue.mapped_files) >= 4
        clock.shift_ms = 60_000
        got = await rig.wait_for("T", n)
        await asyncio.sleep(0.2)  # room for a repeat to show up
        assert [m.body.split(b"-")[0].decode() for m in rig.messages("T")] == [str(i) for i in range(n)]
        assert rig.service.delivered == n and len(got) == n
    finally:
        await rig.close()


async def test_a_level_or_the_writer_cancelled_as_it_is_woken_stops(rig):
    """A cancel that meets a wake-up in the same loop step ends the task (asyncio.wait_for on 3.11 returned
    normally then, and the level went on delivering: a crash test's gather of the cancelled tasks hung)."""
    await asyncio.sleep(0.1)  # the levels are idle, waiting for an arrival; the writer for a delivery
    level_task, writer = rig.service._tasks[0], rig.service._persister
    rig.service._wakeups[1].set()
    rig.service._persist_wanted.set()
    level_task.cancel()
    writer.cancel()
    await asyncio.wait([level_task, writer], timeout=2.0)
    assert level_task.cancelled() and writer.cancelled()
    rig.service._persister = None  # (the fixture's stop waits for the rest)
