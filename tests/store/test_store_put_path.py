"""The put path's cheap forms keep upstream's behaviour: topic checks remembered per topic still refuse
every bad put, batch rules are told apart, the after-put needs no coroutine unless it must wait, and an
inline append stamps the put's clock reading."""

from __future__ import annotations

import pytest
from store_helpers import make_msg, small_config

from store import MessageStoreConfig, PutMessageStatus
from store.flush import AfterPut, GroupCommitService
from store.message import MAX_PROPERTIES_LENGTH, RecordEncoder, RecordError
from store.results import AppendMessageResult


async def test_a_refused_topic_is_refused_on_every_put_and_counted(store_factory):
    s = await store_factory()
    for _ in range(3):
        assert (await s.put_message(make_msg("ok-topic"))).status == PutMessageStatus.PUT_OK
        bad = await s.put_message(make_msg("a/b"))
        assert bad.status == PutMessageStatus.MESSAGE_ILLEGAL and "folder" in bad.remark
        long = await s.put_message(make_msg("t" * 128))
        assert long.status == PutMessageStatus.MESSAGE_ILLEGAL and "topic length 128" in long.remark
    assert s.stats.put_failed == 6
    assert s.putter._topics_ok == {"ok-topic"}


async def test_the_remembered_topics_are_bounded(store_factory, monkeypatch):
    import store.put_message as put_message

    monkeypatch.setattr(put_message, "_TOPICS_OK_MAX", 4)
    s = await store_factory()
    for i in range(10):
        assert (await s.put_message(make_msg(f"T{i}"))).status == PutMessageStatus.PUT_OK
        assert len(s.putter._topics_ok) <= 4


@pytest.mark.parametrize(
    ("change", "remark"),
    [
        (lambda m: setattr(m, "queue_id", 3), "one topic and one queue"),
        (lambda m: setattr(m, "topic", "Other"), "one topic and one queue"),
        (lambda m: setattr(m, "sys_flag", 0x8), "cannot be transactional"),
        (lambda m: m.properties.__setitem__("DELAY", "2"), "cannot be delayed"),
    ],
)
async def test_batch_rules_are_told_apart(store_factory, change, remark):
    s = await store_factory()
    msgs = [make_msg("B") for _ in range(4)]
    change(msgs[2])
    result = await s.put_messages(msgs)
    assert result.status == PutMessageStatus.MESSAGE_ILLEGAL
    assert remark in result.remark


async def test_a_delay_level_of_zero_is_allowed_in_a_batch(store_factory):
    s = await store_factory()
    msgs = [make_msg("B", props={"DELAY": "0"}) for _ in range(3)]
    result = await s.put_messages(msgs)
    assert result.status == PutMessageStatus.PUT_OK and result.append_result.msg_num == 3


async def test_an_inline_append_stamps_the_puts_clock_reading(config_factory, store_factory):
    clock = [1_800_000_000_000]
    s = await store_factory(config_factory(), now_ms=lambda: clock[0])
    msg = make_msg("Stamp")
    result = await s.put_message(msg)
    assert result.append_result.store_timestamp == clock[0] == msg.store_timestamp
    assert s.look_message_by_offset(result.append_result.wrote_offset).store_timestamp == clock[0]


def test_after_put_of_async_flush_needs_no_coroutine():
    after = AfterPut(MessageStoreConfig(store_path_root_dir="/nonexistent"))
    result = AppendMessageResult(0, 100, "id", 0, 0)
    assert after(result, make_msg(), "T") is None


async def test_after_put_of_sync_flush_waits_for_the_group_commit_unless_told_not_to():
    cfg = MessageStoreConfig(store_path_root_dir="/nonexistent", flush_disk_type="SYNC_FLUSH", sync_flush_timeout=50)

    class Service(GroupCommitService):
        def __init__(self) -> None:
            self.requests: list[int] = []
            self.woken = 0

        def put_request(self, offset):
            import asyncio

            self.requests.append(offset)
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(offset < 1000)
            return fut

        def wakeup(self) -> None:
            self.woken += 1

    service = Service()
    after = AfterPut(cfg)
    after.bind(service, None)
    assert await after(AppendMessageResult(0, 100, "id", 0, 0), make_msg(), "T") == PutMessageStatus.PUT_OK
    late = after(AppendMessageResult(2000, 100, "id", 0, 0), make_msg(), "T")
    assert await late == PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert service.requests == [100, 2100]
    assert after(AppendMessageResult(0, 100, "id", 0, 0), make_msg(props={"WAIT": "false"}), "T") is None
    assert service.woken == 1


def test_plan_many_reports_the_batch_size_of_records_with_too_long_properties_first():
    enc = RecordEncoder()
    big = make_msg("Tôpic", b"x" * 10, props={"P": "v" * (MAX_PROPERTIES_LENGTH + 1)})
    small = make_msg("Tôpic", b"y" * 7, props={"A": "b"})
    wire = sum(22 + len(m.body) + len(m.properties_string.encode()) for m in (small, big))
    with pytest.raises(RecordError, match=f"batch of {wire} bytes exceeds maxMessageSize {wire - 1}"):
        enc.plan_many([small, big], wire - 1)
    with pytest.raises(RecordError, match="PROPERTIES_SIZE_EXCEEDED"):
        enc.plan_many([small, big], wire)


def _group():
    """Sends of three queues of two topics, one refused in the middle."""
    msgs = [make_msg("GA", b"a0", queue_id=0, uniq="U0"), make_msg("GB", b"b0", queue_id=1, keys="k1 k2")]
    msgs += [make_msg("bad/topic", b"x"), make_msg("GA", b"a1", queue_id=0), make_msg("GA", b"a2", queue_id=2)]
    msgs += [make_msg("GB", b"b1", queue_id=1, tags="T")]
    return msgs


async def test_a_group_puts_each_message_as_put_message_would(config_factory, store_factory, tmp_path):
    grouped = await store_factory(config_factory())
    alone = await store_factory(small_config_at(tmp_path / "alone"))
    results = await grouped.put_message_group(_group())
    expected = [await alone.put_message(m) for m in _group()]
    assert [r.status for r in results] == [r.status for r in expected]
    assert results[2].status == PutMessageStatus.MESSAGE_ILLEGAL and results[2].append_result is None
    assert grouped.stats.put_failed == alone.stats.put_failed == 1
    for got, want in zip(results, expected):
        if want.append_result is None:
            continue
        g, w = got.append_result, want.append_result
        assert (g.wrote_offset, g.wrote_bytes, g.logics_offset) == (w.wrote_offset, w.wrote_bytes, w.logics_offset)
    for s in (grouped, alone):
        assert s.get_max_offset_in_queue("GA", 0) == 2
        assert s.get_max_offset_in_queue("GB", 1) == 2
        assert s.get_max_offset_in_queue("GA", 2) == 1
        found = s.get_message("g", "GB", 1, 0, 10)
        assert found.message_count == 2
    await grouped.shutdown()
    # what a group appended is found again after a restart (recovery reads the same records)
    again = await store_factory(config_factory())
    assert again.get_max_offset_in_queue("GA", 0) == 2
    assert again.look_message_by_offset(results[5].append_result.wrote_offset).body == b"b1"


async def test_a_group_keeps_its_order_when_the_writer_takes_over(store_factory):
    s = await store_factory()
    stalled = await s.put_message_group([make_msg("S", bytes([i]), queue_id=0) for i in range(5)], stall_append_ms=30)
    assert [r.append_result.logics_offset for r in stalled] == [0, 1, 2, 3, 4]
    offsets = [r.append_result.wrote_offset for r in stalled]
    assert offsets == sorted(offsets)
    # a group that fills the CommitLog file: the rest go to the writer (next file), still in order
    big = [make_msg("S", b"z" * 9000, queue_id=0) for _ in range(12)]  # > one 64 KiB file
    results = await s.put_message_group(big)
    assert all(r.status == PutMessageStatus.PUT_OK for r in results)
    assert [r.append_result.logics_offset for r in results] == list(range(5, 17))
    assert len(s.commit_log.mapped_file_queue.mapped_files) >= 2


async def test_a_group_shares_one_fsync_with_sync_flush(config_factory, store_factory):
    s = await store_factory(config_factory(flush_disk_type="SYNC_FLUSH"))
    flushes = []
    real = s._flusher.flush

    async def counting(least_pages):
        flushes.append(least_pages)
        return await real(least_pages)

    s._flusher.flush = counting
    results = await s.put_message_group([make_msg("F", b"x", queue_id=i % 2) for i in range(8)])
    assert all(r.status == PutMessageStatus.PUT_OK for r in results)
    assert len(flushes) == 1
    assert s.commit_log.mapped_file_queue.flushed_where >= max(
        r.append_result.wrote_offset + r.append_result.wrote_bytes for r in results
    )


async def test_a_group_refused_by_the_store_refuses_every_message(store_factory):
    s = await store_factory()
    await s.shutdown()
    results = await s.put_message_group([make_msg(), make_msg()])
    assert [r.status for r in results] == [PutMessageStatus.SERVICE_NOT_AVAILABLE] * 2


def small_config_at(root):
    return small_config(root)


async def test_a_group_is_appended_in_one_pass_of_the_commit_log(store_factory, monkeypatch):
    """The accepted messages of a group go through the CommitLog's fast path once for the group (one idle
    check, one file lookup, one lock-time accounting), not once per message; each keeps its own result."""
    s = await store_factory()
    cl = s.commit_log
    passes, sections = [], []
    real_group, real_account = cl.append_group_now, cl._account
    monkeypatch.setattr(cl, "append_now", lambda *a, **kw: pytest.fail("a group appended message by message"))
    monkeypatch.setattr(cl, "append_group_now", lambda msgs, *a: passes.append(len(msgs)) or real_group(msgs, *a))
    monkeypatch.setattr(cl, "_account", lambda begin: sections.append(begin) or real_account(begin))
    results = await s.put_message_group(_group())
    assert passes == [5] and len(sections) == 1  # the refused one (bad/topic) never reaches the CommitLog
    assert [r.append_result.logics_offset for r in results if r.append_result] == [0, 0, 1, 0, 1]
    assert len({r.append_result.wrote_offset for r in results if r.append_result}) == 5
