"""MessageStore put/get semantics (protocol §2.3 table), batches, listener, queries, restart."""

from __future__ import annotations

import asyncio

import pytest
from store_helpers import make_msg

from store import (
    GetMessageStatus,
    MessageStore,
    PutMessageStatus,
    TagsMessageFilter,
    decode_offset_msg_id,
    decode_records,
    tags_hash,
)


async def test_put_assigns_offsets_and_ids(store_factory):
    s = await store_factory()
    r0 = await s.put_message(make_msg(body=b"a"))
    r1 = await s.put_message(make_msg(body=b"b"))
    r2 = await s.put_message(make_msg(body=b"c", queue_id=1))
    assert [r.status for r in (r0, r1, r2)] == [PutMessageStatus.PUT_OK] * 3
    assert (r0.append_result.logics_offset, r1.append_result.logics_offset, r2.append_result.logics_offset) == (0, 1, 0)
    assert r1.append_result.wrote_offset == r0.append_result.wrote_offset + r0.append_result.wrote_bytes
    assert decode_offset_msg_id(r1.append_result.msg_id) == ("127.0.0.1", 10911, r1.append_result.wrote_offset)
    assert r0.append_result.store_timestamp > 0
    ext = s.look_message_by_offset(r1.append_result.wrote_offset)
    assert ext.body == b"b" and ext.queue_offset == 1 and ext.store_timestamp == r1.append_result.store_timestamp
    raw = s.select_one_message_by_offset(r1.append_result.wrote_offset)
    assert len(raw) == r1.append_result.wrote_bytes
    assert s.look_message_by_offset(r1.append_result.wrote_offset + 3) is None


async def test_get_message_status_table(store_factory):
    s = await store_factory()
    r = s.get_message("g", "T", 0, 0, 32)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    for i in range(5):
        await s.put_message(make_msg(body=b"m%d" % i))
    r = s.get_message("g", "T", 0, 0, 32)
    assert (r.status, r.message_count, r.next_begin_offset, r.min_offset, r.max_offset) == (
        GetMessageStatus.FOUND,
        5,
        5,
        0,
        5,
    )
    assert [m.body for m in decode_records(r.body)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    r = s.get_message("g", "T", 0, 5, 32)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 5)
    r = s.get_message("g", "T", 0, 9, 32)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 5)
    r = s.get_message("g", "T", 0, 2, 2)
    assert (r.status, r.message_count, r.next_begin_offset) == (GetMessageStatus.FOUND, 2, 4)
    r = s.get_message("g", "T", 0, -1, 32)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, 0)


async def test_tag_filter_counts_scanned_entries(store_factory):
    s = await store_factory()
    for i in range(10):
        await s.put_message(make_msg(tags="A" if i in (3, 7) else "B"))
    f = TagsMessageFilter(frozenset({tags_hash("A")}))
    r = s.get_message("g", "T", 0, 0, 32, f)
    assert r.status == GetMessageStatus.FOUND
    assert r.msg_queue_offsets == [3, 7]
    assert r.next_begin_offset == 10  # filtered entries count as scanned
    r = s.get_message("g", "T", 0, 8, 32, f)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, 10)

    # a filter that is not vectorisable is asked per entry
    class OnlyOdd:
        def is_matched_by_consume_queue(self, code):
            return True

        def is_matched_by_commit_log(self, record, props):
            return record[19] % 2 == 1  # FLAG's low byte

    await s.put_message(make_msg(flag=1))
    r = s.get_message("g", "T", 0, 0, 32, OnlyOdd())
    assert r.msg_queue_offsets == [10]


async def test_batch_limits_first_message_always_taken(store_factory, config_factory):
    cfg = config_factory(max_transfer_bytes_on_message_in_memory=1000, mapped_file_size_commit_log=1 << 20)
    s = await store_factory(cfg)
    for _ in range(3):
        await s.put_message(make_msg(body=b"x" * 2000))
    r = s.get_message("g", "T", 0, 0, 32)
    assert (r.message_count, r.next_begin_offset) == (1, 1)  # bigger than the limit, taken anyway
    small = config_factory()
    assert small.max_transfer_count_on_message_in_memory == 32


async def test_max_32_messages_in_memory(store_factory, config_factory):
    s = await store_factory(config_factory(mapped_file_size_commit_log=1 << 20))
    for _ in range(40):
        await s.put_message(make_msg())
    r = s.get_message("g", "T", 0, 0, 64)
    assert (r.message_count, r.next_begin_offset) == (32, 32)


async def test_put_messages_batch_consecutive(store_factory):
    s = await store_factory()
    await s.put_message(make_msg())
    r = await s.put_messages([make_msg(body=b"%d" % i, uniq=f"U{i}") for i in range(4)])
    assert r.status == PutMessageStatus.PUT_OK
    ar = r.append_result
    assert (ar.logics_offset, ar.msg_num) == (1, 4)
    assert ar.msg_id == ",".join(ar.msg_ids) and len(ar.msg_ids) == 4
    got = decode_records(s.get_message("g", "T", 0, 1, 32).body)
    assert [m.queue_offset for m in got] == [1, 2, 3, 4]
    assert [m.body for m in got] == [b"0", b"1", b"2", b"3"]
    bad = await s.put_messages([make_msg(), make_msg(queue_id=2)])
    assert bad.status == PutMessageStatus.MESSAGE_ILLEGAL


async def test_illegal_messages(store_factory, config_factory):
    s = await store_factory(config_factory(max_message_size=100))
    assert (await s.put_message(make_msg(topic="t" * 128))).status == PutMessageStatus.MESSAGE_ILLEGAL
    assert (await s.put_message(make_msg(body=b"x" * 101))).status == PutMessageStatus.MESSAGE_ILLEGAL
    r = await s.put_message(make_msg(props={"big": "v" * 33000}))
    assert r.status == PutMessageStatus.PROPERTIES_SIZE_EXCEEDED


async def test_roll_over_writes_blank_and_reads_across_files(store_factory):
    s = await store_factory()
    body = b"y" * 3000
    for _ in range(60):  # ~185 KB over 64 KiB files
        assert (await s.put_message(make_msg(body=body))).status == PutMessageStatus.PUT_OK
    files = s.commit_log.mapped_file_queue.mapped_files
    assert len(files) >= 3
    import struct

    first = files[0]
    # the first file ends with a BLANK record whose size is the rest of the file
    pos = 0
    while True:
        size, magic = struct.unpack_from(">ii", first.view, pos)
        if magic & 0xFFFFFFFF == 0xCBD43194:
            assert pos + size == first.file_size
            break
        pos += size
    msgs = []
    off = 0
    while off < 60:
        r = s.get_message("g", "T", 0, off, 32)
        msgs += decode_records(r.body)
        off = r.next_begin_offset
    assert [m.queue_offset for m in msgs] == list(range(60))
    assert all(m.body == body for m in msgs)


async def test_listener_is_called_after_dispatch(store_factory):
    s = await store_factory()
    calls = []

    def listener(topic, qid, offset, tags_code, store_ts, props):
        # the consume queue already has the entry when the listener runs
        calls.append((topic, qid, offset, tags_code, s.get_max_offset_in_queue(topic, qid)))

    s.message_arriving_listener = listener
    await s.put_message(make_msg(tags="A"))
    await s.put_message(make_msg(tags="A"))
    assert calls == [("T", 0, 1, tags_hash("A"), 1), ("T", 0, 2, tags_hash("A"), 2)]


async def test_offsets_and_times(store_factory):
    now = [1_800_000_000_000]
    s = await store_factory(now_ms=lambda: now[0])
    for _i in range(10):
        now[0] += 1000
        await s.put_message(make_msg())
    assert s.get_max_offset_in_queue("T", 0) == 10
    assert s.get_min_offset_in_queue("T", 0) == 0
    assert s.get_max_offset_in_queue("nope", 0) == 0
    assert s.get_earliest_message_time("T", 0) == 1_800_000_001_000
    assert s.get_offset_in_queue_by_time("T", 0, 1_800_000_004_000) == 3
    assert s.get_commit_log_offset_in_queue("T", 0, 1) > 0


async def test_messages_survive_clean_restart(config_factory):
    cfg = config_factory()
    s = MessageStore(cfg)
    assert await s.load()
    await s.start()
    for i in range(300):
        await s.put_message(make_msg(body=b"%05d" % i, queue_id=i % 3, tags="A"))
    await s.shutdown()
    s2 = MessageStore(config_factory())
    assert await s2.load()
    await s2.start()
    try:
        assert s2.last_recovery["normal"] and s2.last_recovery["startFile"] == "checkpoint"
        for q in range(3):
            assert s2.get_max_offset_in_queue("T", q) == 100
        r = s2.get_message("g", "T", 1, 98, 32)
        assert [m.body for m in decode_records(r.body)] == [b"%05d" % (98 * 3 + 1), b"%05d" % (99 * 3 + 1)]
        nxt = await s2.put_message(make_msg(queue_id=2))
        assert nxt.append_result.logics_offset == 100
    finally:
        await s2.shutdown()


async def test_put_after_shutdown_is_refused(config_factory):
    s = MessageStore(config_factory())
    assert await s.load()
    await s.start()
    await s.shutdown()
    r = await s.put_message(make_msg())
    assert r.status == PutMessageStatus.SERVICE_NOT_AVAILABLE


async def test_slave_refuses_puts(store_factory, config_factory):
    s = await store_factory(config_factory(broker_role="SLAVE"))
    assert (await s.put_message(make_msg())).status == PutMessageStatus.SERVICE_NOT_AVAILABLE


async def test_second_store_on_same_dir_fails_to_load(store_factory, config_factory):
    await store_factory()
    other = MessageStore(config_factory())
    assert await other.load() is False


async def test_delay_level_goes_to_schedule_topic(store_factory):
    s = await store_factory()
    r = await s.put_message(make_msg(topic="Real", queue_id=2, props={"DELAY": "3"}))
    ext = s.look_message_by_offset(r.append_result.wrote_offset)
    assert (ext.topic, ext.queue_id) == ("SCHEDULE_TOPIC_XXXX", 2)
    assert ext.properties["REAL_TOPIC"] == "Real" and ext.properties["REAL_QID"] == "2"
    cq = s.find_consume_queue("SCHEDULE_TOPIC_XXXX", 2)
    # tags code of a delayed message = its delivery time (level 3 = 10 s)
    assert cq.get_entry(0)[2] == ext.store_timestamp + 10_000


def test_pool_requires_async_flush_master(config_factory):
    from store import StoreConfigError

    with pytest.raises(StoreConfigError, match="ASYNC_FLUSH"):
        MessageStore(config_factory(transient_store_pool_enable=True, flush_disk_type="SYNC_FLUSH"))
    with pytest.raises(StoreConfigError, match="master"):
        MessageStore(config_factory(transient_store_pool_enable=True, broker_role="SLAVE"))


async def test_reads_after_shutdown_raise_a_clear_error(config_factory):
    from store import StoreNotReadableError

    s = MessageStore(config_factory())
    assert await s.load()
    await s.start()
    await s.put_message(make_msg())
    await s.shutdown()
    with pytest.raises(StoreNotReadableError, match="getMessage"):
        s.get_message("g", "T", 0, 0, 32)
    with pytest.raises(StoreNotReadableError):
        s.look_message_by_offset(0)


async def test_puts_in_a_tight_loop_let_the_event_loop_run(store_factory, config_factory):
    """An idle writer appends on the caller's stack (no hop to the writer task); such puts still yield
    to the loop now and then, so a caller putting in a loop cannot starve other coroutines, and the
    index is complete for every put that returned."""
    # files large enough that no put waits for a new one (that would yield anyway)
    s = await store_factory(
        config_factory(
            mapped_file_size_commit_log=1024 * 1024, mapped_file_size_consume_queue=1000 * 20, max_index_num=4096
        )
    )
    await s.put_message(make_msg())  # creates the consume queue and index files
    ticks = [0]
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            ticks[0] += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    for i in range(640):
        r = await s.put_message(make_msg(uniq=f"L{i}"))
        assert r.status == PutMessageStatus.PUT_OK
    got = s.query_message("T", "L639", 32, 0, 2**62)
    stop.set()
    await task
    assert ticks[0] >= 5  # one yield per 64 puts
    assert len(got.buffers) == 1
