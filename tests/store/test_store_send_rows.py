"""The SEND path's group put in one pass (``MessageStore.put_sent_group``, store/send_rows.py): rows planned,
written, entered, indexed and announced in one loop, with the effects of ``put_message_group`` on the same
messages: the same CommitLog bytes, queue offsets, ids, consume queue entries, index keys, arrival notices and
statistics; at the first row it does not take (or a message among the rows) the rest goes through
``put_message_group``, in order. Without the one pass the first test fails (the group is dispatched by
``dispatch_group``), without the stops the differential ones do."""

from __future__ import annotations

import asyncio
import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import make_msg, small_config

from store import MessageStore, PutMessageStatus
from store.message import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageExtBrokerInner,
)
from store.send_rows import row_message

NOW = 1_700_000_123_456  # one clock for both stores: the same store timestamps, delivery times, ids


def rowable(m: MessageExtBrokerInner) -> bool:
    """Whether the send processor may hand the message over as a row (`store.send_rows.SendRow`)."""
    return (
        m.body.__class__ is bytes
        and not m.sys_flag & (TRANSACTION_ROLLBACK_TYPE | BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
        and "DELAY" not in m.properties
    )


def row(m: MessageExtBrokerInner) -> tuple:
    """The message as the send processor hands it over (`store.send_rows.SendRow`; its hosts: the group's)."""
    assert m.prepared_transaction_offset == 0 and rowable(m)
    got = (
        m.topic,
        m.queue_id,
        m.body,
        m.properties,
        m.properties_string,
        m.tags_code,
        m.flag,
        m.sys_flag,
        m.born_timestamp,
        m.reconsume_times,
    )
    assert row_message(got, m.born_host, m.store_host) == m
    return got


def _hosts(msgs) -> tuple:
    """The group's born and store hosts (a group's rows share them)."""
    return (msgs[0].born_host, msgs[0].store_host) if msgs else (("127.0.0.1", 1), ("127.0.0.1", 2))


async def _open(root, rows_listener: bool = False, **overrides) -> tuple[MessageStore, list[tuple]]:
    """A store whose arrival notices are recorded (with `rows_listener`, those of the one pass's rows as its one
    call a group gives them, in the message listener's form)."""
    s = MessageStore(small_config(root, **overrides), now_ms=lambda: NOW)
    assert await s.load()
    await s.start()
    await s.index_service.ensure_file()
    notices: list[tuple] = []
    s.message_arriving_listener = lambda topic, qid, max_offset, tags_code, ts, props: notices.append(
        (topic, qid, max_offset, tags_code, ts, dict(props or {}))
    )
    if rows_listener:

        def rows_arriving(rows, results, ts, topics) -> None:
            assert results and all(r.__class__ is tuple for r in results)
            assert {row[0] for row in rows[: len(results)]} <= set(topics)
            # (row: topic, queue id, body, properties, string, tags code, ...; result: msg id, queue offset, size)
            notices.extend((row[0], row[1], r[1] + 1, row[5], ts, dict(row[3])) for row, r in zip(rows, results))
            notices.append("one call")

        s.rows_arriving_listener = rows_arriving
    return s, notices


async def _warm(s: MessageStore, queues) -> None:
    for topic, qid in queues:
        assert (await s.put_message(make_msg(topic, b"w", queue_id=qid))).status == PutMessageStatus.PUT_OK
    await s.reput.wait_dispatched(s.commit_log.get_max_offset())


def _answers(results) -> list:
    """A stored row's (msg_id, queue offset, size), or a put result's status and the same three."""
    out = []
    for r in results:
        if r.__class__ is tuple:
            out.append((PutMessageStatus.PUT_OK, r))
        else:
            ar = r.append_result
            out.append((r.status, ar and (ar.msg_id, ar.logics_offset, ar.wrote_bytes)))
    return out


def _seen(s: MessageStore, queues, keys) -> dict:
    """What readers see: each queue's entries (offset, size, tags) and records, the index, the statistics."""
    seen: dict = {}
    for topic, qid in queues:
        cq = s.dispatcher.get_consume_queue(topic, qid)
        entries = []
        if cq is not None:
            for mf in cq.mapped_file_queue.mapped_files:
                arr = cq.array_of(mf)[: mf.wrote_position // 20]
                entries += [(int(e["offset"]), int(e["size"]), int(e["tags"])) for e in arr]
        got = s.get_message("g", topic, qid, 0, 1000)
        seen[(topic, qid)] = (entries, bytes(got.body) if got.buffers else b"")
    s.dispatcher.build_index_keys()
    for topic, key in keys:
        seen[("key", topic, key)] = s.query_message(topic, key, 64, 0, 2**62).message_count
    cl = s.commit_log
    seen["stats"] = (cl.put_message_times_total, cl.put_message_size_total, s.stats.put_count, s.stats.put_failed)
    seen["reput"] = s.reput.reput_from_offset
    return seen


async def _both(
    tmp_path, msgs, *, rows_at=None, warm=(), queues=(), keys=(), rows_listener=False, lone=False, **overrides
):
    """`msgs` through `put_sent_group` (as rows where `rows_at` says, else all) in one store and through
    `put_message_group` in another: (rows store, its results, its notices, its items), (messages store, ...).
    `rows_listener`: the rows store's notices of its one pass come in one call (`rows_arriving_listener`).
    `lone`: the rows store gets each item as a group of its own (a row: `SendRowPut.put_one`)."""
    a, a_notices = await _open(tmp_path / "rows", rows_listener, **overrides)
    b, b_notices = await _open(tmp_path / "msgs", **overrides)
    try:
        await _warm(a, warm)
        await _warm(b, warm)
        copies = [copy.deepcopy(m) for m in msgs]
        items = [row(m) if (rows_at is None or rows_at[k]) and rowable(m) else m for k, m in enumerate(msgs)]
        if lone:
            got = []
            for k, item in enumerate(items):
                one = [item]
                got += await a.put_sent_group(one, *_hosts(msgs))
                items[k] = one[0]
        else:
            got = await a.put_sent_group(items, *_hosts(msgs))
        want = await b.put_message_group(copies)
        await a.reput.wait_dispatched(a.commit_log.get_max_offset())
        await b.reput.wait_dispatched(b.commit_log.get_max_offset())
        a_cl, b_cl = a.commit_log, b.commit_log
        a_bytes = bytes(a_cl.get_data(0)[1][: a_cl.get_max_offset()])
        assert a_bytes == bytes(b_cl.get_data(0)[1][: b_cl.get_max_offset()])
        assert _answers(got) == _answers(want)
        if rows_listener:  # one call for the rows stored in the pass, if any, before the general path's notices
            calls = a_notices.count("one call")
            if lone:
                assert calls == sum(r.__class__ is tuple for r in got)
            else:
                assert calls == (1 if got and got[0].__class__ is tuple else 0)
            a_notices = [n for n in a_notices if n != "one call"]
        assert a_notices == b_notices
        every = sorted(set(queues) | {(m.topic, m.queue_id) for m in copies} | set(warm))
        assert _seen(a, every, keys) == _seen(b, every, keys)
        # each item not stored in the one pass is now the message put, as the other store's
        for item, result, m in zip(items, got, copies):
            if result.__class__ is tuple:
                assert item.__class__ is tuple
            else:
                assert item.__class__ is MessageExtBrokerInner and item == m
        return got, items
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_a_group_of_rows_is_stored_in_one_pass_with_the_effects_of_a_message_group(tmp_path, monkeypatch):
    """The benchmark Producer's sends (UNIQ_KEY, no tags) and some with tags and keys, over warm queues: every row
    stored in the one pass (a tuple result), no dispatch_group, no put_message_group, the same bytes and effects."""
    from store.dispatcher import CommitLogDispatcher
    from store.put_message import MessagePutter

    msgs = [
        make_msg("GA", b"x" * 1024, queue_id=k % 3, uniq=f"U{k}", tags="TagA" if k % 4 == 0 else None)
        for k in range(16)
    ]
    msgs[5] = make_msg("GA", b"k5", queue_id=2, uniq="U5", keys="one two")
    msgs[6] = make_msg("GA", b"k6", queue_id=0, uniq="U6", keys="solo")
    warm = [("GA", 0), ("GA", 1), ("GA", 2)]
    calls: list[str] = []
    real_group = MessagePutter.put_message_group
    real_dispatch = CommitLogDispatcher.dispatch_group

    def put_message_group(self, msgs, **kw):
        calls.append("put_message_group")
        return real_group(self, msgs, **kw)

    def dispatch_group(self, *a):
        calls.append("dispatch_group")
        return real_dispatch(self, *a)

    monkeypatch.setattr(MessagePutter, "put_message_group", put_message_group)
    monkeypatch.setattr(CommitLogDispatcher, "dispatch_group", dispatch_group)
    keys = [("GA", f"U{k}") for k in range(16)] + [("GA", "one"), ("GA", "two"), ("GA", "solo")]
    got, _ = await _both(tmp_path, msgs, warm=warm, keys=keys)
    assert all(r.__class__ is tuple for r in got)
    # the message store's group took put_message_group and dispatch_group once each; the rows neither
    assert calls == ["put_message_group", "dispatch_group"]
    # and both are recovered alike (queues, index, the CommitLog's end)
    seen = []
    for name in ("rows", "msgs"):
        again, _ = await _open(tmp_path / name)
        try:
            seen.append((_seen(again, warm, keys), again.commit_log.get_max_offset()))
        finally:
            await again.shutdown()
    assert seen[0] == seen[1]


def _stoppers():
    """One of each row the one pass leaves to the general path, after two it stores."""
    return {
        "delay": make_msg("GA", b"d", queue_id=0, uniq="UD", props={"DELAY": "3"}),
        "prepared": make_msg("GA", b"p", queue_id=0, uniq="UP", sys_flag=TRANSACTION_PREPARED_TYPE),
        "commit": make_msg("GA", b"c", queue_id=0, uniq="UC", sys_flag=TRANSACTION_COMMIT_TYPE),
        "rollback": make_msg("GA", b"r", queue_id=0, uniq="UR", sys_flag=TRANSACTION_ROLLBACK_TYPE),
        "new queue": make_msg("GA", b"n", queue_id=3, uniq="UN"),
        "new topic": make_msg("GNew", b"n", queue_id=0, uniq="UT"),
        "bad topic": make_msg("bad/topic", b"b"),
        "big": make_msg("GA", b"z" * 5000, queue_id=1),  # a staged pwrite without a pre-fault window
        "bytearray": MessageExtBrokerInner.create("GA", bytearray(b"ba"), queue_id=1),
        "huge properties": make_msg("GA", b"h", queue_id=1, props={"X": "y" * 33_000}),
        "file end": make_msg("GA", b"e" * 60_000, queue_id=1),
    }


@pytest.mark.parametrize("stopper", list(_stoppers()))
@pytest.mark.parametrize("as_row", [True, False])
async def test_the_pass_stops_at_a_row_it_does_not_take_and_the_rest_goes_the_general_way(tmp_path, stopper, as_row):
    """Each kind of row the one pass does not take (and the same as a message among rows), between stored rows:
    the rows before it stored in the pass, it and the rest by put_message_group, the effects as one group's."""
    before = [make_msg("GA", f"a{k}".encode(), queue_id=k % 2, uniq=f"A{k}") for k in range(2)]
    after = [make_msg("GA", f"b{k}".encode(), queue_id=k % 2, uniq=f"B{k}", tags="T") for k in range(3)]
    msgs = [*before, _stoppers()[stopper], *after]
    rows_at = [True, True, as_row, True, True, True]
    got, _ = await _both(
        tmp_path,
        msgs,
        rows_at=rows_at,
        warm=[("GA", 0), ("GA", 1), ("SCHEDULE_TOPIC_XXXX", 2)],
        queues=[("GA", 3), ("GNew", 0)],
        keys=[("GA", "A0"), ("GA", "B2"), ("GA", "UD"), ("GA", "UP"), ("GA", "UR"), ("GA", "UN"), ("GNew", "UT")],
        prefault_ahead_bytes=0,
    )
    assert [r.__class__ is tuple for r in got] == [True, True, False, False, False, False]


@pytest.mark.parametrize("stopper", list(_stoppers()))
async def test_a_lone_row_the_pass_would_not_take_goes_the_general_way(tmp_path, stopper):
    """A group of one (`SendRowPut.put_one`): each kind of row `put`'s loop stops at goes through put_message_group,
    between lone rows it stores; the effects as one message group's."""
    msgs = [
        make_msg("GA", b"a0", queue_id=0, uniq="A0", tags="T"),
        _stoppers()[stopper],
        make_msg("GA", b"b0", queue_id=1, uniq="B0", props={"KEYS": "K1 K2"}),
    ]
    got, items = await _both(
        tmp_path,
        msgs,
        lone=True,
        rows_listener=True,
        warm=[("GA", 0), ("GA", 1), ("SCHEDULE_TOPIC_XXXX", 2)],
        queues=[("GA", 3), ("GNew", 0)],
        keys=[("GA", "A0"), ("GA", "B0"), ("GA", "K2"), ("GA", "UD"), ("GA", "UP"), ("GA", "UN"), ("GNew", "UT")],
        prefault_ahead_bytes=0,
    )
    assert [r.__class__ is tuple for r in got] == [True, False, True]


async def test_a_lone_row_is_put_as_put_stores_it(tmp_path):
    """`put_one` against `put` (the loop) on the same lone rows, two stores: the CommitLog byte for byte, results,
    entries, index and statistics alike, hosts changing between groups (the cached host parts)."""
    stores = [await _open(tmp_path / name) for name in ("one", "loop")]
    try:
        msgs = [
            make_msg("GA", f"m{k}".encode() * k, queue_id=k % 2, uniq=f"U{k}", props={"KEYS": f"K{k}"} if k % 3 else {})
            for k in range(8)
        ]
        hosts = [_HOSTS[k % 3] for k in range(8)]
        got = []
        for s, _ in stores:
            await _warm(s, [("GA", 0), ("GA", 1)])
            results = []
            for m, born in zip(msgs, hosts):
                put = s.putter.send_rows.put_one if s is stores[0][0] else s.putter.send_rows.put
                results += await put([row(m)], born, m.store_host)
            got.append(results)
        assert all(r.__class__ is tuple for r in got[0]) and got[0] == got[1]
        a, b = (s.commit_log for s, _ in stores)
        assert bytes(a.get_data(0)[1][: a.get_max_offset()]) == bytes(b.get_data(0)[1][: b.get_max_offset()])
        keys = [("GA", f"U{k}") for k in range(8)] + [("GA", f"K{k}") for k in range(8)]
        assert _seen(stores[0][0], [("GA", 0), ("GA", 1)], keys) == _seen(stores[1][0], [("GA", 0), ("GA", 1)], keys)
        assert stores[0][1] == stores[1][1]
    finally:
        for s, _ in stores:
            await s.shutdown()


_GN_QUEUES = [("GN", q) for q in range(4)]  # (under 100 entries each: no consume queue's next file)


async def test_put_now_answers_at_once_and_yields_every_64th_only_in_a_row(tmp_path):
    """`put_now` (the group entry's put) against `put` on the same groups, two stores: its results at once (a list)
    while the pass took every row and nothing waits; in a row (`put`'s way) the group that reaches the 64th append
    on the caller's stack is an awaitable (the yield), after which the count starts again; with `in_a_row` False
    (a read's callback) no group counts or yields. Same results, CommitLog bytes, entries, index and statistics."""
    stores = [await _open(tmp_path / name) for name in ("now", "put")]
    try:
        groups = [
            [make_msg("GN", f"g{g}m{k}".encode() * k, queue_id=k % 4, uniq=f"U{g}x{k}") for k in range(2 + g % 7)]
            for g in range(40)
        ]
        got = []
        for s, _ in stores:
            await _warm(s, _GN_QUEUES)
            rows_put = s.putter.send_rows
            results = []
            yields = 0
            for g, msgs in enumerate(groups):
                born, store = _hosts(msgs)
                if s is stores[1][0]:
                    results += await rows_put.put([row(m) for m in msgs], born, store)
                    continue
                in_a_row = g < 20
                before = s.putter._inline_appends
                out = rows_put.put_now([row(m) for m in msgs], born, store, in_a_row)
                if not in_a_row:
                    assert out.__class__ is list and s.putter._inline_appends == before, g
                elif before + len(msgs) >= 64:
                    assert out.__class__ is not list, g  # (the every-64th yield: the rest to await)
                    out = await out
                    assert s.putter._inline_appends == 0
                    yields += 1
                else:
                    assert out.__class__ is list and s.putter._inline_appends == before + len(msgs), g
                results += out
            got.append(results)
            assert yields == 1 or s is stores[1][0]
        assert all(r.__class__ is tuple for r in got[0]) and got[0] == got[1]
        a, b = (s.commit_log for s, _ in stores)
        assert bytes(a.get_data(0)[1][: a.get_max_offset()]) == bytes(b.get_data(0)[1][: b.get_max_offset()])
        keys = [("GN", f"U{g}x{k}") for g in range(0, 40, 3) for k in range(2)]
        assert _seen(stores[0][0], _GN_QUEUES, keys) == _seen(stores[1][0], _GN_QUEUES, keys)
        assert stores[0][1] == stores[1][1]
        assert stores[0][0].stats.put_count == stores[1][0].stats.put_count
    finally:
        for s, _ in stores:
            await s.shutdown()


async def test_the_pass_stops_where_a_consume_queue_needs_its_next_file(tmp_path):
    """A queue file holds 100 entries: rows of one queue are entered up to its end, the rest (the next file,
    made in a worker thread) go the general way; every entry once, in order."""
    msgs = [make_msg("Cross", f"m{i}".encode(), queue_id=0, uniq=f"U{i}") for i in range(150)]
    got, _ = await _both(tmp_path, msgs, warm=[("Cross", 0)], keys=[("Cross", "U120"), ("Cross", "U3")])
    assert [r.__class__ is tuple for r in got] == [True] * 99 + [False] * 51


@pytest.mark.parametrize(
    "overrides",
    [
        {"flush_disk_type": "SYNC_FLUSH"},
        {"transient_store_pool_enable": True, "transient_store_pool_size": 2},
    ],
)
async def test_a_store_the_pass_does_not_serve_puts_rows_the_general_way(tmp_path, overrides):
    """SYNC_FLUSH (each put waits for its fsync) and a transient pool (records readable once committed): no row is
    stored in the pass, the group is put_message_group's."""
    s, _ = await _open(tmp_path / "s", **overrides)
    try:
        await _warm(s, [("GA", 0)])
        msgs = [make_msg("GA", f"m{k}".encode(), uniq=f"U{k}") for k in range(4)]
        items = [row(m) for m in msgs]
        results = await s.put_sent_group(items, *_hosts(msgs))
        assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 4
        assert all(item.__class__ is MessageExtBrokerInner for item in items)
    finally:
        await s.shutdown()


async def test_a_row_that_raises_keeps_the_rows_before_it_stored_and_dispatched(tmp_path):
    """(A bug's path) a row whose record cannot be packed (a flag outside J's int) raises out of the group; the
    rows before it are stored, entered and announced, the section is closed and the next put goes on from there."""
    s, notices = await _open(tmp_path / "s")
    try:
        await _warm(s, [("GA", 0)])
        msgs = [make_msg("GA", b"ok", uniq="OK"), make_msg("GA", b"bad", flag=2**40)]
        with pytest.raises(Exception):  # noqa: B017,PT011 - struct.error, whatever the pack says
            await s.put_sent_group([row(m) for m in msgs], *_hosts(msgs))
        assert s.commit_log.begin_time_in_lock == 0
        assert s.get_max_offset_in_queue("GA", 0) == 2 and len(notices) == 2
        assert s.reput.reput_from_offset == s.commit_log.get_max_offset()
        with pytest.raises(Exception):  # noqa: B017,PT011 - the same row alone (put_one): nothing of it stays
            await s.put_sent_group([row(msgs[1])], *_hosts(msgs))
        assert s.commit_log.begin_time_in_lock == 0 and len(notices) == 2
        assert s.reput.reput_from_offset == s.commit_log.get_max_offset()
        results = await s.put_sent_group([row(make_msg("GA", b"next", uniq="NX"))], *_hosts(msgs))
        assert results[0].__class__ is tuple and results[0][1] == 2
        got = s.get_message("g", "GA", 0, 0, 10)
        assert got.message_count == 3
    finally:
        await s.shutdown()


_HOSTS = [("10.0.0.9", 53211), ("192.168.1.20", 1), ("127.0.0.1", 10911)]


@st.composite
def _group(draw) -> tuple[list, list[bool]]:
    """Sends as a group may hold them: topics and queues mixed (some queues warm, some not), bodies of any length
    and type, each transaction kind, DELAY, keys, tags, hosts changing or not; each a row or a message."""
    msgs = []
    born_host, store_host = draw(st.sampled_from(_HOSTS)), draw(st.sampled_from(_HOSTS[1:]))  # (the group's)
    for _ in range(draw(st.integers(1, 14))):
        length = draw(st.one_of(st.integers(0, 300), st.integers(4000, 5000)))
        body = draw(st.binary(min_size=1, max_size=8)) * length
        kind = draw(st.sampled_from([bytes, bytes, bytes, bytes, bytearray]))
        props = draw(
            st.dictionaries(
                st.sampled_from(["a", "ключ", "TAGS", "UNIQ_KEY", "KEYS", "DELAY"]),
                st.text("0Aé ", min_size=1, max_size=6),
            )
        )
        msgs.append(
            MessageExtBrokerInner.create(
                draw(st.sampled_from(["HA", "HA", "HB", "H" * 100])),
                kind(body),
                queue_id=draw(st.integers(0, 2)),
                properties=props,
                sys_flag=draw(
                    st.sampled_from(
                        [0, 0, 0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, 0x1, BORNHOST_V6_FLAG]
                    )
                ),
                flag=draw(st.integers(-(2**31), 2**31 - 1)),
                born_timestamp=1_700_000_000_000,
                reconsume_times=draw(st.integers(0, 16)),
                born_host=born_host,
                store_host=store_host,
            )
        )
    rows_at = [draw(st.booleans()) or draw(st.booleans()) for _ in msgs]
    return msgs, rows_at


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_group(), st.booleans())
def test_rows_store_what_a_message_group_stores(tmp_path_factory, group, rows_listener) -> None:
    """Differential over hypothesis groups: the CommitLog byte for byte, answers, notices (one listener call a row,
    or the rows' in one call), queue entries and records, index keys and statistics against `put_message_group` of
    the same messages."""
    msgs, rows_at = group
    root = tmp_path_factory.mktemp("rows")
    warm = [("HA", 0), ("HA", 1), ("HB", 2), ("H" * 100, 0)]
    keys = [(t, k) for t in ("HA", "HB") for k in ("0", "A", "é", "0A", "AA")]
    asyncio.run(_both(root, msgs, rows_at=rows_at, warm=warm, keys=keys, rows_listener=rows_listener))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_group(), st.booleans())
def test_lone_rows_store_what_a_message_group_stores(tmp_path_factory, group, rows_listener) -> None:
    """The same differential with every item a group of its own (`put_one` for a row)."""
    msgs, rows_at = group
    root = tmp_path_factory.mktemp("lone")
    warm = [("HA", 0), ("HA", 1), ("HB", 2), ("H" * 100, 0)]
    keys = [(t, k) for t in ("HA", "HB") for k in ("0", "A", "é", "0A", "AA")]
    asyncio.run(_both(root, msgs, rows_at=rows_at, warm=warm, keys=keys, rows_listener=rows_listener, lone=True))


async def test_a_failing_rows_listener_costs_the_notices_not_the_records(tmp_path, capsys):
    """A rows listener that raises: one error line, the records stored, entered and answered all the same."""
    s, _ = await _open(tmp_path / "s")
    try:
        await _warm(s, [("GA", 0)])

        def boom(*_args) -> None:
            raise RuntimeError("listener bug")

        s.rows_arriving_listener = boom
        msgs = [make_msg("GA", f"m{k}".encode(), uniq=f"U{k}") for k in range(3)]
        results = await s.put_sent_group([row(m) for m in msgs], *_hosts(msgs))
        assert [r[1] for r in results] == [1, 2, 3]
        assert s.get_message("g", "GA", 0, 0, 10).message_count == 4
        assert "rows arriving listener failed" in capsys.readouterr().out
    finally:
        await s.shutdown()
