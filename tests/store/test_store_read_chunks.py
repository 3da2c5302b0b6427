"""The read side walks a match-everything pull in chunks of maxMsgNums entries (a drain pull reads 32
consume-queue entries, not upstream's 800-entry window); the answers must be those of the full window."""

from __future__ import annotations

from store_helpers import EveryEntryFilter, make_msg

from store import GetMessageStatus, PutMessageStatus
from store.mapped_file import MappedFile
from store.results import TagsMessageFilter


def _answer(r):
    return r.status, r.next_begin_offset, r.message_count, list(r.msg_queue_offsets), [bytes(b) for b in r.buffers]


async def _fill(s, n: int, body: bytes) -> None:
    for _ in range(n):
        assert (await s.put_message(make_msg(body=body))).status == PutMessageStatus.PUT_OK


async def test_chunked_walk_answers_as_the_full_window(store_factory):
    # 100 entries per consume-queue file, 64 KiB commit-log files: 250 messages of 1.5 KiB cross both
    s = await store_factory()
    await _fill(s, 250, b"c" * 1500)
    mfq = s.commit_log.mapped_file_queue
    # removed records at the head, past the first queue file's end: the walk skips over them
    mfq._delete_head(mfq.mapped_files[:3])
    for offset in (0, 1, 30, 68, 95, 99, 100, 150, 199, 240, 249):
        for max_nums in (1, 3, 32, 64):
            full = s.get_message("g", "T", 0, offset, max_nums, EveryEntryFilter())
            for chunked_filter in (None, TagsMessageFilter(None)):
                chunked = s.get_message("g", "T", 0, offset, max_nums, chunked_filter)
                assert _answer(chunked) == _answer(full), (offset, max_nums, chunked_filter)


async def test_chunked_walk_stops_at_the_queue_file_end(store_factory):
    s = await store_factory()
    await _fill(s, 150, b"e" * 100)
    r = s.get_message("g", "T", 0, 90, 32)
    # upstream's window ends with the consume-queue file (100 entries): 10 messages, next pull at 100
    assert (r.status, r.message_count, r.next_begin_offset) == (GetMessageStatus.FOUND, 10, 100)


async def test_drain_pull_reads_max_msg_nums_entries(store_factory, monkeypatch):
    s = await store_factory()
    await _fill(s, 90, b"d" * 100)
    cq = s.dispatcher.get_consume_queue("T", 0)
    asked: list[int | None] = []
    get_entries = cq.get_entries

    def spy(index, max_entries=None):
        asked.append(max_entries)
        return get_entries(index, max_entries)

    monkeypatch.setattr(cq, "get_entries", spy)
    r = s.get_message("g", "T", 0, 0, 32)
    assert (r.message_count, r.next_begin_offset) == (32, 32)
    assert asked == [32]


async def test_each_record_is_cut_at_its_consume_queue_entry_across_commit_log_files(store_factory):
    """The walk cuts consecutive records from the view of the file it selected last: every record must still be
    the bytes its consume-queue entry points at, whichever of the 64 KiB commit-log files holds it, with
    records of other queues between them (two queues, alternating)."""
    s = await store_factory()
    for n in range(240):
        msg = make_msg(body=bytes([65 + n % 26]) * (700 + 13 * (n % 7)), queue_id=n % 2)
        assert (await s.put_message(msg)).status == PutMessageStatus.PUT_OK
    mfq = s.commit_log.mapped_file_queue
    assert len(mfq.mapped_files) > 2
    for queue_id in (0, 1):
        cq = s.dispatcher.get_consume_queue("T", queue_id)
        for offset in (0, 7, 31, 60, 99, 119):
            r = s.get_message("g", "T", queue_id, offset, 32)
            assert r.status == GetMessageStatus.FOUND and r.message_count == min(32, 120 - offset, 100 - offset % 100)
            for queue_offset, record in zip(r.msg_queue_offsets, r.buffers, strict=True):
                phy, size, _ = cq.get_entry(queue_offset)
                mf = mfq.find_mapped_file_by_offset(phy)
                assert bytes(record) == bytes(mf.select(phy - mf.file_from_offset, size))


async def test_transfer_limits_cut_a_chunk_as_the_full_window(store_factory, config_factory):
    """The list path takes a whole chunk only within the in-memory transfer limits; a pull past them (bytes,
    count, or records far behind the end, which the disk limits govern) is cut exactly as the full window cuts it."""
    for limits in (
        {"max_transfer_bytes_on_message_in_memory": 5000},
        {"max_transfer_count_on_message_in_memory": 5},
        {"access_message_in_memory_max_ratio": 0, "max_transfer_count_on_message_in_disk": 3},
    ):
        cfg = config_factory()
        for key, value in limits.items():
            setattr(cfg, key, value)
        s = await store_factory(cfg)
        await _fill(s, 64, b"l" * 700)
        for offset in (0, 5, 40):
            full = s.get_message("g", "T", 0, offset, 32, EveryEntryFilter())
            assert full.message_count < 32, limits
            assert _answer(s.get_message("g", "T", 0, offset, 32)) == _answer(full), (limits, offset)
        await s.shutdown()


async def test_drain_pull_in_one_file_cuts_its_records_without_a_walk(store_factory, monkeypatch):
    """A pull of 32 records that lie in one commit-log file below its read position is taken in list passes: one
    select() vouches for the span from the first record's start to the last one's end (the per-record walk selects
    the first record alone), and each record is cut from that span."""
    s = await store_factory()
    for n in range(96):  # three queues interleaved: the records of one queue are not contiguous
        msg = make_msg(body=bytes([65 + n % 26]) * (300 + n), queue_id=n % 3)
        assert (await s.put_message(msg)).status == PutMessageStatus.PUT_OK
    mfq = s.commit_log.mapped_file_queue
    mf = mfq.mapped_files[0]
    selects: list[tuple[int, int]] = []
    select = MappedFile.select

    def spy(self, pos, size):
        selects.append((pos, size))
        return select(self, pos, size)

    monkeypatch.setattr(MappedFile, "select", spy)
    r = s.get_message("g", "T", 1, 0, 32)
    assert (r.status, r.message_count, r.next_begin_offset) == (GetMessageStatus.FOUND, 32, 32)
    cq = s.dispatcher.get_consume_queue("T", 1)
    first_phy = cq.get_entry(0)[0]
    last_phy, last_size, _ = cq.get_entry(31)
    assert selects == [(first_phy - mf.file_from_offset, last_phy + last_size - first_phy)]
    assert r.msg_queue_offsets == list(range(32))
    for queue_offset, record in zip(r.msg_queue_offsets, r.buffers, strict=True):
        phy, size, _ = cq.get_entry(queue_offset)
        assert bytes(record) == bytes(select(mf, phy - mf.file_from_offset, size))
    assert r.buffer_total_size == sum(len(b) for b in r.buffers)


def _full_answer(r):
    return (*_answer(r), r.buffer_total_size, r.suggest_pulling_from_slave, r.min_offset, r.max_offset)


async def test_one_entry_pull_answers_as_the_walk(store_factory, monkeypatch):
    """A match-everything pull that finds one entry (a consumer keeping up with its producer) takes its record with
    one select(): the same answer as the walk, including the transfer accounting and the slave suggestion, for the
    last entry of a queue file and of the queue, a pull of 1 anywhere, and records removed with their file."""
    s = await store_factory()
    await _fill(s, 250, b"c" * 1500)
    mfq = s.commit_log.mapped_file_queue
    mfq._delete_head(mfq.mapped_files[:3])
    reader = s.reader
    taken: list[int] = []
    take_one = type(reader)._take_one

    def spy(self, entries, offset, result):
        found = take_one(self, entries, offset, result)
        if found is not None:
            taken.append(offset)
        return found

    cases = [(offset, max_nums) for offset in (0, 30, 68, 99, 150, 199, 249) for max_nums in (1, 32)]
    get_last = type(reader)._get_last
    for offset, max_nums in cases:
        monkeypatch.setattr(type(reader), "_take_one", lambda self, entries, offset, result: None)
        monkeypatch.setattr(type(reader), "_get_last", lambda self, cq, last, offset: None)
        walked = s.get_message("g", "T", 0, offset, max_nums)
        monkeypatch.setattr(type(reader), "_take_one", spy)
        monkeypatch.setattr(type(reader), "_get_last", get_last)
        fast = s.get_message("g", "T", 0, offset, max_nums)
        assert _full_answer(fast) == _full_answer(walked), (offset, max_nums)
    # taken for a readable record alone in its pull; the records of the three removed 64 KiB files (the first ~130
    # messages: 0-99 here) go to the walk, which answers MESSAGE_WAS_REMOVING or skips on to the next file; the
    # queue's last entry (249) is `_get_last`'s (tests/store/test_store_read_tail.py)
    assert set(taken) == {150, 199}
    assert s.stats.get_transferred > 0


async def test_few_entries_pull_answers_as_the_walk(store_factory, config_factory, monkeypatch):
    """A match-everything pull that finds 2-7 entries takes them from one span (as `_take_all` does): the same
    answer as the walk for pulls of 2-7, at queue-file and queue ends, across commit-log files (two queues
    interleaved), for removed records and when the transfer limits cut the pull."""
    cfg = config_factory(max_transfer_bytes_on_message_in_memory=3 * 1600, max_transfer_count_on_message_in_memory=5)
    s = await store_factory(cfg)
    for n in range(300):
        msg = make_msg(body=bytes([65 + n % 26]) * (1400 + 13 * (n % 7)), queue_id=n % 2)
        assert (await s.put_message(msg)).status == PutMessageStatus.PUT_OK
    mfq = s.commit_log.mapped_file_queue
    mfq._delete_head(mfq.mapped_files[:2])
    reader_cls = type(s.reader)
    taken: list[tuple[int, int]] = []
    take_few = reader_cls._take_few

    def spy(self, entries, offset, result):
        found = take_few(self, entries, offset, result)
        if found is not None:
            taken.append((offset, result.message_count))
        return found

    def nothing(self, entries, offset, result):
        return None

    for offset in (0, 40, 60, 95, 97, 120, 146, 148):
        for max_nums in (2, 3, 5, 7):
            monkeypatch.setattr(reader_cls, "_take_few", nothing)
            monkeypatch.setattr(reader_cls, "_take_one", nothing)
            walked = s.get_message("g", "T", 0, offset, max_nums)
            monkeypatch.setattr(reader_cls, "_take_few", spy)
            fast = s.get_message("g", "T", 0, offset, max_nums)
            assert _full_answer(fast) == _full_answer(walked), (offset, max_nums)
    # taken where the records are readable and within the limits (at most 3 records' bytes): pulls of 2 and 3, the
    # last two entries of the queue (148), the 3 left before the queue file's end (97, asked 3-7); a pull of 5 from
    # 60 is past the byte limit, records 0-40 were removed, and 146's two records lie in two commit-log files
    assert {(60, 2), (60, 3), (95, 3), (97, 3), (120, 3), (148, 2)} <= set(taken)
    assert max(count for _, count in taken) == 3
    assert not [t for t in taken if t[0] in (0, 40, 146)]


async def test_back_to_back_records_are_answered_as_one_span(store_factory):
    """Records that lie back to back in the commit log (here one queue's: every put goes to queue 0, as a batch
    sent to one queue lies) come back as ONE view, ``span``: its bytes are the walk's records joined, and the
    records cut from it lazily (``buffers``) are the walk's, for pulls of 2-7 entries and of 8 or more."""
    s = await store_factory()
    await _fill(s, 100, b"s" * 300)
    for offset, max_nums in ((0, 32), (10, 5), (40, 2), (50, 8), (68, 32), (97, 32)):
        fast = s.get_message("g", "T", 0, offset, max_nums)
        walked = s.get_message("g", "T", 0, offset, max_nums, EveryEntryFilter())
        assert walked.span is None
        assert fast.span is not None, (offset, max_nums)
        assert bytes(fast.span) == b"".join(bytes(b) for b in walked.buffers)
        assert _full_answer(fast) == _full_answer(walked), (offset, max_nums)
        assert fast.body == walked.body


async def test_interleaved_records_are_cut_one_by_one(store_factory):
    """Records of one queue with another queue's between them cannot be one view: ``span`` stays None and the
    records are cut from the commit log one by one, as before."""
    s = await store_factory()
    for n in range(96):
        assert (await s.put_message(make_msg(body=b"i" * 200, queue_id=n % 2))).status == PutMessageStatus.PUT_OK
    for max_nums in (3, 32):
        r = s.get_message("g", "T", 1, 0, max_nums)
        assert r.status == GetMessageStatus.FOUND and r.message_count == max_nums
        assert r.span is None
        assert len(r.buffers) == max_nums


def test_back_to_back_records_cut_lazily_read_as_a_list():
    """``BackToBack`` reads as the list of records it stands for (length, index, slice, iteration, join)."""
    from store.results import BackToBack, GetMessageResult

    r = GetMessageResult(GetMessageStatus.FOUND, 3, 0, 3)
    r.set_span(memoryview(b"aaabbc"), [3, 2, 1])
    assert len(r.buffers) == 3 and bool(r.buffers) and isinstance(r.buffers, BackToBack)
    assert [bytes(b) for b in r.buffers] == [b"aaa", b"bb", b"c"]
    assert bytes(r.buffers[1]) == b"bb" and [bytes(b) for b in r.buffers[1:]] == [b"bb", b"c"]
    assert b"".join(r.buffers) == r.body == b"aaabbc"
