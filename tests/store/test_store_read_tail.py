"""A pull at the tail of its queue (0-7 entries short of the end: a consumer that keeps up parks there and is woken
for the next one to few) is answered by ``MessageReader._get_tail`` without the general read; every answer it
gives must be the general read's, field by field, with the same store statistics, and whatever it declines must
go to the general read."""

from __future__ import annotations

import itertools

from store_helpers import EveryEntryFilter, make_msg

from store import GetMessageStatus, PutMessageStatus
from store.results import TagsMessageFilter


class MatchesAllFilter(EveryEntryFilter):
    matches_all = True


def _answer(r):
    return (
        r.status,
        r.next_begin_offset,
        r.min_offset,
        r.max_offset,
        r.message_count,
        list(r.msg_queue_offsets),
        [bytes(b) for b in r.buffers],
        None if r.span is None else bytes(r.span),
        r.buffer_total_size,
        r.suggest_pulling_from_slave,
        r.body if r.status == GetMessageStatus.FOUND else None,
    )


def _counters(s):
    return s.stats.get_found, s.stats.get_miss, s.stats.get_transferred


def _both(s, queue_id: int, offset: int, max_nums: int, flt):
    """(tail-path answer, general answer), each with the statistics it moved."""
    reader = s.reader
    before = _counters(s)
    fast = reader.get_message("g", "T", queue_id, offset, max_nums, flt)
    mid = _counters(s)
    cq = s.dispatcher.get_consume_queue("T", queue_id)
    general = reader._get_message(cq, cq.get_max_offset_in_queue(), offset, max_nums, flt)
    after = _counters(s)
    moved_fast = tuple(b - a for a, b in zip(before, mid, strict=True))
    moved_general = tuple(b - a for a, b in zip(mid, after, strict=True))
    return (_answer(fast), moved_fast), (_answer(general), moved_general)


FILTERS = (None, TagsMessageFilter(None), TagsMessageFilter(frozenset({1})), EveryEntryFilter(), MatchesAllFilter())


async def _fill_and_check(s, check, last_alone: bool = False) -> None:  # noqa: ANN001
    """The layouts both differential tests read, each read by ``check(queue_id)`` as it is made: queue 0 single
    records with queue 1's between them, queue 2 back to back, then queue 2 across its consume-queue file's end
    (100 entries a file; with ``last_alone`` one more: the last entry alone in a new file), then the commit log's
    head removed (queue 0's and 1's first records with it)."""
    for n in range(97):
        body = bytes([65 + n % 26]) * (1400 + 13 * (n % 7))
        assert (await s.put_message(make_msg(body=body, queue_id=n % 2, tags="a"))).status == PutMessageStatus.PUT_OK
    for _ in range(6):
        assert (await s.put_message(make_msg(body=b"b" * 500, queue_id=2))).status == PutMessageStatus.PUT_OK
    for q in (0, 1, 2):
        check(q)
    for _ in range(97):
        assert (await s.put_message(make_msg(body=b"c" * 300, queue_id=2))).status == PutMessageStatus.PUT_OK
    assert s.get_max_offset_in_queue("T", 2) == 103
    check(2)
    if last_alone:
        assert (await s.put_message(make_msg(body=b"d" * 300, queue_id=2))).status == PutMessageStatus.PUT_OK
        check(2)
    mfq = s.commit_log.mapped_file_queue
    mfq._delete_head(mfq.mapped_files[:1])
    for q in (0, 1, 2):
        check(q)


async def test_tail_answers_as_the_general_read(store_factory, config_factory, monkeypatch):
    """Every offset from 9 short of the end to 2 past it, pulls of -1 to 32 messages, each filter kind, on: a queue
    of batches (records back to back), two interleaved queues, one whose consume-queue file just rolled (100
    entries a file: the tail's entries in two files), records removed with their commit-log file, and the
    in-memory transfer limits cutting a pull."""
    cfg = config_factory(max_transfer_bytes_on_message_in_memory=3 * 1600, max_transfer_count_on_message_in_memory=5)
    s = await store_factory(cfg)
    taken: list[tuple[str, int, int]] = []
    reader_cls = type(s.reader)
    get_tail, get_last, general_read = reader_cls._get_tail, reader_cls._get_last, reader_cls._get_message

    def tail_spy(self, cq, last, offset, behind, max_nums):
        r = get_tail(self, cq, last, offset, behind, max_nums)
        if r is not None:
            taken.append(("tail", offset, r.message_count))
        return r

    def last_spy(self, cq, last, offset):
        r = get_last(self, cq, last, offset)
        if r is not None:
            taken.append(("last", offset, r.message_count))
        return r

    general_calls = [0]

    def general_spy(self, *args):
        general_calls[0] += 1
        return general_read(self, *args)

    monkeypatch.setattr(reader_cls, "_get_tail", tail_spy)
    monkeypatch.setattr(reader_cls, "_get_last", last_spy)
    monkeypatch.setattr(reader_cls, "_get_message", general_spy)

    def check(queue_id: int) -> None:
        end = s.get_max_offset_in_queue("T", queue_id)
        for offset, max_nums, flt in itertools.product(range(end - 9, end + 3), (-1, 0, 1, 2, 3, 7, 32), FILTERS):
            fast, general = _both(s, queue_id, offset, max_nums, flt)
            assert fast == general, (queue_id, offset, max_nums, flt)

    await _fill_and_check(s, check)
    # the tail paths answered the one-to-few reads they can (and the parks, inline: fewer general reads than
    # pulls asked), and declined the rest
    assert any(kind == "last" for kind, _, _ in taken)
    assert any(kind == "tail" and count == 1 for kind, _, count in taken)  # a pull of 1 of several
    assert any(kind == "tail" and count >= 2 for kind, _, count in taken)
    asked = 7 * 12 * len(FILTERS) * 7  # the checks' pulls: each asked twice, once through the general read
    assert asked < general_calls[0] < 2 * asked - 100


async def test_caught_up_pulls_skip_the_general_read(store_factory, monkeypatch):
    """The park (nothing past the offset) and the woken pull of one or a few messages never reach the general
    read (a test that fails without the tail path)."""
    s = await store_factory()
    for _ in range(5):
        assert (await s.put_message(make_msg(body=b"x" * 100))).status == PutMessageStatus.PUT_OK

    def general(*args):
        raise AssertionError("the general read ran")

    monkeypatch.setattr(s.reader, "_get_message", general)
    park = s.get_message("g", "T", 0, 5, 32, TagsMessageFilter(None))
    assert (park.status, park.next_begin_offset, park.min_offset, park.max_offset) == (
        GetMessageStatus.OFFSET_OVERFLOW_ONE,
        5,
        0,
        5,
    )
    one = s.get_message("g", "T", 0, 4, 32)
    assert (one.status, one.message_count, one.next_begin_offset) == (GetMessageStatus.FOUND, 1, 5)
    assert b"x" * 100 in bytes(one.buffers[0])
    few = s.get_message("g", "T", 0, 1, 32)
    assert (few.status, few.message_count, few.next_begin_offset, few.msg_queue_offsets) == (
        GetMessageStatus.FOUND,
        4,
        5,
        [1, 2, 3, 4],
    )


async def test_an_empty_queue_goes_to_the_general_read(store_factory):
    """Offset 0 of a queue with no entries is NO_MESSAGE_IN_QUEUE (the general read's rule), not OVERFLOW_ONE."""
    s = await store_factory()
    assert (await s.put_message(make_msg(body=b"x", queue_id=1))).status == PutMessageStatus.PUT_OK
    r = s.get_message("g", "T", 0, 0, 32)
    assert r.status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)


async def test_woken_one_reads_as_get_message(store_factory, config_factory):
    """`MessageReader.get_woken_one` (a caught-up consumer's woken pull, match-everything) against `get_message` on
    the same store: its (view, min offset) is get_message's FOUND of that one record (next and max offset + 1, the
    same statistics), anything else is get_message's own result; every offset from 9 short of the end to 2 past it,
    pulls of -1 to 32, single, interleaved and back-to-back records, a consume-queue file that just rolled, a removed
    commit-log head, the transfer limits."""
    cfg = config_factory(max_transfer_bytes_on_message_in_memory=3 * 1600, max_transfer_count_on_message_in_memory=5)
    s = await store_factory(cfg)
    reader = s.reader
    kinds = {"one": 0, "result": 0}

    def check(queue_id: int) -> None:
        end = s.get_max_offset_in_queue("T", queue_id)
        for offset, max_nums in itertools.product(range(end - 9, end + 3), (-1, 0, 1, 2, 7, 32)):
            before = _counters(s)
            woken = s.get_woken_one("g", "T", queue_id, offset, max_nums)
            mid = _counters(s)
            want = reader.get_message("g", "T", queue_id, offset, max_nums, None)
            after = _counters(s)
            moved = [tuple(b - a for a, b in zip(x, y, strict=True)) for x, y in ((before, mid), (mid, after))]
            assert moved[0] == moved[1], (queue_id, offset, max_nums)
            if woken.__class__ is tuple:
                kinds["one"] += 1
                view, min_offset = woken
                assert want.status == GetMessageStatus.FOUND and want.message_count == 1, (queue_id, offset)
                assert (want.next_begin_offset, want.max_offset, want.min_offset) == (
                    offset + 1,
                    offset + 1,
                    min_offset,
                )
                assert list(want.msg_queue_offsets) == [offset]
                assert bytes(view) == bytes(want.body) and len(view) == want.buffer_total_size
            else:
                kinds["result"] += 1
                assert _answer(woken) == _answer(want), (queue_id, offset, max_nums)

    await _fill_and_check(s, check, last_alone=True)
    assert kinds["one"] >= 6 and kinds["result"] > 100
