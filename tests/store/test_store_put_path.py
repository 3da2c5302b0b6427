"""The put path's cheap forms keep upstream's behaviour: topic checks remembered per topic still refuse
every bad put, batch rules are told apart, the after-put needs no coroutine unless it must wait, and an
inline append stamps the put's clock reading."""

from __future__ import annotations

import pytest
from store_helpers import make_msg

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
