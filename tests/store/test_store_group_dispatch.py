"""A group of single sends (``put_message_group``) is written in one pass of the CommitLog and dispatched with one
``CommitLogDispatcher.dispatch_group`` call, with the same effects as putting each message alone: the same records,
queue offsets, consume queue entries, index keys and arrival notices, in the same order. Without the group pass
the dispatcher is entered once per record (``dispatch_appended``) and the first test fails."""

from __future__ import annotations

import asyncio
import copy
import errno

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import make_msg, small_config

from store import MessageStore, PutMessageStatus
from store.mapped_file import MappedFile
from store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageExtBrokerInner,
)
from store.results import StoredPut

NOW = 1_700_000_123_456  # one clock for both stores: the same store timestamps, delivery times, ids


def _mixed():
    """Three queues of two topics, tags, one and several keys, transactions of each kind, a DELAY level, a
    refused topic in the middle."""
    return [
        make_msg("GA", b"a0", queue_id=0, uniq="U0", tags="TagA"),
        make_msg("GB", b"b0", queue_id=1, keys="k1 k2", uniq="U1"),
        make_msg("GA", b"a1", queue_id=0, keys="solo", tags="TagB"),
        make_msg("bad/topic", b"x"),
        make_msg("GA", b"p0", queue_id=2, uniq="UP", sys_flag=TRANSACTION_PREPARED_TYPE),
        make_msg("GA", b"c0", queue_id=2, uniq="UC", sys_flag=TRANSACTION_COMMIT_TYPE),
        make_msg("GA", b"r0", queue_id=2, uniq="UR", sys_flag=TRANSACTION_ROLLBACK_TYPE),
        make_msg("GB", b"d0", queue_id=1, uniq="UD", props={"DELAY": "3"}),
        make_msg("GB", b"b1", queue_id=1, tags="TagA"),
    ]


async def _open(root, *, fixed_clock: bool = True, **overrides) -> tuple[MessageStore, list[tuple]]:
    s = MessageStore(small_config(root, **overrides), **({"now_ms": lambda: NOW} if fixed_clock else {}))
    assert await s.load()
    await s.start()
    await s.index_service.ensure_file()  # (else the inline dispatch leaves everything to the reput until it exists)
    notices: list[tuple] = []
    s.message_arriving_listener = lambda topic, qid, max_offset, tags_code, ts, props: notices.append(
        (topic, qid, max_offset, tags_code, ts, (props or {}).get("UNIQ_KEY"))
    )
    return s, notices


async def _warm(s: MessageStore, msgs) -> None:
    """One put per queue the test uses: its consume queue file exists (the inline dispatch stops at a queue's
    first entry, whose file the reput creates)."""
    for m in msgs:
        assert (await s.put_message(m)).status == PutMessageStatus.PUT_OK
    await s.reput.wait_dispatched(s.commit_log.get_max_offset())


def _warmers():
    return [
        make_msg("GA", b"w", queue_id=0),
        make_msg("GA", b"w", queue_id=2),
        make_msg("GB", b"w", queue_id=1),
        make_msg("GB", b"w", queue_id=1, props={"DELAY": "3"}),
    ]


def _view(s: MessageStore, queues) -> dict:
    """What a reader sees of the queues and the index."""
    seen = {}
    for topic, qid in queues:
        got = s.get_message("g", topic, qid, 0, 1000)
        seen[(topic, qid)] = (s.get_max_offset_in_queue(topic, qid), bytes(got.body) if got.buffers else b"")
    s.dispatcher.build_index_keys()
    for topic, key in [("GA", "U0"), ("GB", "k1"), ("GB", "k2"), ("GA", "solo"), ("GA", "UP"), ("GA", "UR")]:
        seen[(topic, key)] = s.query_message(topic, key, 32, 0, 2**62).message_count
    return seen


_QUEUES = [("GA", 0), ("GA", 2), ("GB", 1), ("SCHEDULE_TOPIC_XXXX", 2)]


async def test_a_group_is_dispatched_once_with_the_effects_of_single_puts(tmp_path, monkeypatch):
    grouped, g_notices = await _open(tmp_path / "group")
    alone, a_notices = await _open(tmp_path / "alone")
    try:
        calls = []
        real = grouped.dispatcher.dispatch_group

        def dispatch_group(*a):
            done = real(*a)
            calls.append((len(a[0]), done))
            return done

        await _warm(grouped, _warmers())
        await _warm(alone, _warmers())
        monkeypatch.setattr(grouped.dispatcher, "dispatch_group", dispatch_group)
        monkeypatch.setattr(
            grouped.dispatcher, "dispatch_appended", lambda *a: pytest.fail("a group dispatched record by record")
        )
        results = await grouped.put_message_group(_mixed())
        expected = [await alone.put_message(m) for m in _mixed()]
        assert calls == [(8, 8)]  # all dispatched inline; the refused one never reaches the CommitLog
        assert [r.status for r in results] == [r.status for r in expected]
        for got, want in zip(results, expected):
            if want.append_result is None:
                assert got.append_result is None
                continue
            g, w = got.append_result, want.append_result
            assert (g.wrote_offset, g.wrote_bytes, g.logics_offset, g.msg_id, g.store_timestamp) == (
                w.wrote_offset,
                w.wrote_bytes,
                w.logics_offset,
                w.msg_id,
                w.store_timestamp,
            )
        # each inline put's result is one object (StoredPut: the append's values in it), equal to the single put's
        # two (PutMessageResult + AppendMessageResult), msg_num and page_cache_rt included
        assert [r.__class__ for r in results if r.append_result is not None] == [StoredPut] * 8
        assert results == expected and expected == results
        assert [r.append_result for r in results] == [r.append_result for r in expected]
        assert g_notices == a_notices and len(g_notices) == 4 + 8  # each stored record announced, as alone
        assert _view(grouped, _QUEUES) == _view(alone, _QUEUES)
        assert grouped.reput.reput_from_offset == alone.reput.reput_from_offset == grouped.commit_log.get_max_offset()
        assert grouped.stats.put_count == alone.stats.put_count == 4 + 8
    finally:
        await grouped.shutdown()
        await alone.shutdown()
    again, _ = await _open(tmp_path / "group")  # what the group wrote is recovered as it was
    try:
        assert again.get_max_offset_in_queue("GA", 0) == 3 and again.get_max_offset_in_queue("GB", 1) == 3
    finally:
        await again.shutdown()


async def test_a_group_crossing_a_consume_queue_file_leaves_the_rest_to_the_reput(tmp_path):
    """The queue's file holds 100 entries: the inline dispatch stops at the 101st (its file is created in a
    worker thread) and the reput dispatches the rest before the put returns, each once."""
    s, notices = await _open(tmp_path / "s")
    try:
        await _warm(s, [make_msg("Cross", b"w", queue_id=0, uniq="U-1")])
        dispatched = []
        real = s.dispatcher.dispatch_group
        s.dispatcher.dispatch_group = lambda *a: dispatched.append(real(*a)) or dispatched[-1]
        msgs = [make_msg("Cross", f"m{i}".encode(), queue_id=0, uniq=f"U{i}") for i in range(150)]
        results = await s.put_message_group(msgs)
        assert dispatched == [99]  # the file's 100 entries hold the warm-up one and 99 of these
        assert all(r.status == PutMessageStatus.PUT_OK for r in results)
        assert [r.append_result.logics_offset for r in results] == list(range(1, 151))
        assert s.get_max_offset_in_queue("Cross", 0) == 151
        assert len(s.dispatcher.consume_queue_table["Cross"][0].mapped_file_queue.mapped_files) == 2
        assert [n[2] for n in notices] == list(range(1, 152))
        assert [n[5] for n in notices] == [f"U{i}" for i in range(-1, 150)]
        s.dispatcher.build_index_keys()
        assert s.query_message("Cross", "U120", 8, 0, 2**62).message_count == 1
    finally:
        await s.shutdown()


async def test_a_group_in_a_pool_buffer_is_dispatched_by_the_reput(tmp_path):
    """With a transient pool the records are readable only once committed: the group is described for the
    reput, which dispatches it after the commit."""
    s, notices = await _open(
        tmp_path / "s", fixed_clock=False, transient_store_pool_enable=True, transient_store_pool_size=2
    )
    try:
        results = await s.put_message_group([make_msg("Pool", f"m{i}".encode(), queue_id=i % 2) for i in range(6)])
        assert all(r.status == PutMessageStatus.PUT_OK for r in results)
        await s.reput.wait_dispatched(s.commit_log.get_max_offset())
        for _ in range(200):
            if len(notices) == 6:
                break
            await _sleep()
        assert sorted(n[:3] for n in notices) == sorted(("Pool", i % 2, i // 2 + 1) for i in range(6))
        assert s.get_max_offset_in_queue("Pool", 0) == s.get_max_offset_in_queue("Pool", 1) == 3
    finally:
        await s.shutdown()


async def test_a_failed_write_in_a_group_costs_only_that_message(tmp_path, monkeypatch):
    """A record that goes through the staging pwrite (4 KiB or more, past the pre-fault window) and fails is
    answered UNKNOWN_ERROR; the records around it are stored back to back and dispatched."""
    s, _ = await _open(tmp_path / "s", prefault_ahead_bytes=0)
    try:

        def failing(self, data, pos):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(MappedFile, "write_at", failing)
        msgs = [make_msg("W", b"s0"), make_msg("W", b"x" * 5000), make_msg("W", b"s1")]
        results = await s.put_message_group(msgs)
        assert [r.status for r in results] == [
            PutMessageStatus.PUT_OK,
            PutMessageStatus.UNKNOWN_ERROR,
            PutMessageStatus.PUT_OK,
        ]
        a, c = results[0].append_result, results[2].append_result
        assert c.wrote_offset == a.wrote_offset + a.wrote_bytes and c.logics_offset == 1
        got = s.get_message("g", "W", 0, 0, 10)
        assert got.message_count == 2
        assert s.stats.put_failed == 1
    finally:
        await s.shutdown()


async def _sleep() -> None:
    import asyncio

    await asyncio.sleep(0.01)


async def test_a_group_that_ends_a_file_counts_its_records_not_the_blank(tmp_path):
    """The group pass writes the BLANK that ends a CommitLog file and hands the rest to the writer: the
    statistics count the records' bytes only, and the next file starts with the first message left over."""
    s, _ = await _open(tmp_path / "s", fixed_clock=False)
    try:
        msgs = [make_msg("End", b"z" * 9000, queue_id=0) for _ in range(9)]  # > one 64 KiB file
        results = await s.put_message_group(msgs)
        assert all(r.status == PutMessageStatus.PUT_OK for r in results)
        cl = s.commit_log
        assert cl.put_message_size_total == sum(r.append_result.wrote_bytes for r in results)
        assert cl.put_message_times_total == 9
        second = [r.append_result.wrote_offset for r in results if r.append_result.wrote_offset >= 64 * 1024]
        assert second and second[0] == 64 * 1024
        assert s.get_max_offset_in_queue("End", 0) == 9
    finally:
        await s.shutdown()


async def test_a_group_dispatch_that_fails_is_replayed_by_the_reput_without_twice_indexed_keys(tmp_path, monkeypatch):
    """An unexpected error in the inline group dispatch (one error line) leaves the whole group to the reput:
    every entry is written once and each key is indexed once (the keys queued before the error are dropped,
    the replay queues them again)."""
    from store.consume_queue import ConsumeQueue

    s, notices = await _open(tmp_path / "s", fixed_clock=False)
    try:
        await _warm(s, [make_msg("Fail", b"w", queue_id=0), make_msg("Fail", b"w", queue_id=1)])
        queued = []
        real_group = s.dispatcher._dispatch_group
        s.dispatcher._dispatch_group = lambda *a: queued.append(1) or real_group(*a)
        real = ConsumeQueue.try_append

        def broken(self, *a):
            if self.queue_id == 1:
                raise RuntimeError("disk says no")
            return real(self, *a)

        monkeypatch.setattr(ConsumeQueue, "try_append", broken)
        built: list[str] = []
        real_build = s.index_service.build_keys
        s.index_service.build_keys = lambda keys, *a: built.extend(keys) or real_build(keys, *a)
        msgs = [make_msg("Fail", b"f0", queue_id=0, uniq="F0"), make_msg("Fail", b"f1", queue_id=1, uniq="F1")]
        results = await s.put_message_group(msgs)
        assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 2
        await s.reput.wait_dispatched(s.commit_log.get_max_offset())
        assert queued == [1]  # the inline group dispatch ran (and failed at F1, after queueing F0's key)
        assert s.get_max_offset_in_queue("Fail", 0) == 2 and s.get_max_offset_in_queue("Fail", 1) == 2
        s.dispatcher.build_index_keys()
        assert sorted(built) == ["Fail#F0", "Fail#F1"]  # (queries would hide a twice-indexed record: one phy)
        assert s.query_message("Fail", "F0", 8, 0, 2**62).message_count == 1
        assert s.query_message("Fail", "F1", 8, 0, 2**62).message_count == 1
    finally:
        await s.shutdown()


_HOSTS = [("10.0.0.9", 53211), ("192.168.1.20", 1), ("127.0.0.1", 10911)]


@st.composite
def _group_messages(draw) -> list:
    """Single sends as a group may hold them: topics and queues mixed, bodies of any length (some not bytes: the
    group writes those in three steps), each transaction kind, hosts changing or not between messages."""
    out = []
    for _ in range(draw(st.integers(1, 12))):
        body = draw(st.binary(max_size=3000))
        kind = draw(st.sampled_from([bytes, bytes, bytes, bytearray]))
        props = draw(
            st.dictionaries(st.sampled_from(["a", "bb", "ключ", "TAGS", "UNIQ_KEY"]), st.text("0Aé", min_size=1))
        )
        out.append(
            MessageExtBrokerInner.create(
                draw(st.sampled_from(["HA", "HB", "H" * 100])),
                kind(body),
                queue_id=draw(st.integers(0, 2)),
                properties=props,
                sys_flag=draw(
                    st.sampled_from(
                        [0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE, 0x1]
                    )
                ),
                flag=draw(st.integers(-(2**31), 2**31 - 1)),
                born_timestamp=1_700_000_000_000,
                reconsume_times=draw(st.integers(0, 16)),
                born_host=draw(st.sampled_from(_HOSTS)),
                store_host=draw(st.sampled_from(_HOSTS[1:])),
            )
        )
    return out


async def _commit_log_of(root, msgs, grouped: bool) -> tuple[bytes, list[tuple]]:
    s, _ = await _open(root)
    try:
        if grouped:
            results = await s.put_message_group(msgs)
        else:
            results = [await s.put_message(m) for m in msgs]
        cl = s.commit_log
        _, view = cl.get_data(0)
        answers = [
            (r.status, r.append_result and (r.append_result.msg_id, r.append_result.logics_offset)) for r in results
        ]
        return bytes(view[: cl.get_max_offset()]), answers
    finally:
        await s.shutdown()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_group_messages())
def test_a_group_writes_the_bytes_single_puts_write(tmp_path_factory, msgs) -> None:
    """The group's record writes (`CommitLog._write_group`: one `pack_into` of a cached record Struct for a bytes
    body, three steps for another) against `RecordEncoder.write` of single puts: the same CommitLog, byte for byte,
    and the same ids and queue offsets (both clocks fixed)."""
    root = tmp_path_factory.mktemp("bytes")
    copies = [copy.copy(m) for m in msgs]  # (a put sets the store timestamp: each store its own messages)
    got = asyncio.run(_commit_log_of(root / "group", msgs, True))
    want = asyncio.run(_commit_log_of(root / "alone", copies, False))
    assert got == want
