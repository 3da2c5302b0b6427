"""MessageReader: the store's read side (upstream DefaultMessageStore.getMessage and the offset queries).

`get_message` applies upstream's status and nextBeginOffset rules and the transfer limits (in memory or
on disk by how far behind the CommitLog's end a record is), filtering by tags code in one numpy pass
when the filter offers a code set; the offset queries answer from the consume queues and the CommitLog;
`query_message` reads the hash index (up to three rounds, newest first) and checks each record really
carries the key. Reads return views into the mapped files, never copies.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from operator import add
from typing import Any

import numpy as np

from store.commit_log import CommitLog
from store.config import CQ_STORE_UNIT_SIZE, BrokerRole, MessageStoreConfig
from store.consume_queue import ConsumeQueue, tags_to_int32
from store.dispatcher import CommitLogDispatcher
from store.index_service import IndexService
from store.message import MESSAGE_MAGIC_CODE, MessageConst, MessageExt, RecordError, decode_record
from store.results import GetMessageResult, GetMessageStatus, MessageFilter, QueryMessageResult
from store.stats import StoreStats

# The walk's per-record loop costs less than `_take_all`'s fixed list passes below this many entries
# (bench: a pull of 1 took 1.2x as long through `_take_all`, a pull of 32 0.63x).
TAKE_ALL_MIN_ENTRIES = 8

# One consume-queue entry (commitLogOffset, size, tagsCode), read with struct by `_get_tail`: for the one to seven
# entries at a queue's tail a numpy view and its tolist() cost more than the unpack.
_CQ_ENTRY = struct.Struct(">qiq")
_new_object = object.__new__
_FOUND = GetMessageStatus.FOUND
assert _CQ_ENTRY.size == CQ_STORE_UNIT_SIZE


class StoreNotReadableError(RuntimeError):
    """A read on a store that is not loaded (or already shut down)."""


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


class MessageReader:
    def __init__(
        self,
        config: MessageStoreConfig,
        commit_log: CommitLog,
        dispatcher: CommitLogDispatcher,
        index_service: IndexService,
        stats: StoreStats,
        loaded: Callable[[], bool],
        now_ms: Callable[[], int],
    ) -> None:
        """`loaded()` says whether the store's files are open (reads before load or after shutdown raise
        StoreNotReadableError)."""
        self.config = config
        self.commit_log = commit_log
        self.dispatcher = dispatcher
        self.index_service = index_service
        self.stats = stats
        self._loaded = loaded
        self.now_ms = now_ms
        self._total_memory = _total_physical_memory()

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Up to `max_msg_nums` raw records from `offset` (upstream DefaultMessageStore.getMessage).

        Raises StoreNotReadableError once the store is shut down (upstream returns null there; the
        broker answers SYSTEM_ERROR either way).

        A pull at the tail of its queue (a consumer that keeps up: its park finds nothing, its woken re-run one
        to a few entries) is answered here or by `_get_last` / `_get_tail` when they apply; everything else, and
        whatever they decline, by the general read `_get_message` (the same answer, field by field, and the same
        statistics: tests/store/test_store_read_tail.py). The caught-up consume cycle's two reads cost ~250 and
        ~670 bytecodes through the general read. (No ``get_time`` on these paths: a read without a loop or a page
        of disk is well under the millisecond that statistic counts in.)"""
        if not self._loaded():  # (_ensure_readable, inlined)
            raise StoreNotReadableError("message store is not loaded or has shut down, so getMessage is forbidden")
        queues = self.dispatcher.consume_queue_table.get(topic)  # (get_consume_queue, inlined)
        cq = None if queues is None else queues.get(queue_id)
        max_offset = 0
        if cq is not None:
            files = cq.mapped_file_queue.mapped_files
            if files:
                last = files[-1]  # (the queue's max offset is its last file's read position: max_offset())
                start = last.file_from_offset
                # (a consume-queue file never has a pool's write buffer, only commit-log files are given one: its
                # read position is its wrote position, read without the property's call)
                max_offset = (start + last.wrote_position) // CQ_STORE_UNIT_SIZE
                behind = max_offset - offset
                if 0 <= behind < TAKE_ALL_MIN_ENTRIES and offset * CQ_STORE_UNIT_SIZE >= cq.min_logic_offset:
                    if not behind:
                        if max_offset:  # (an empty queue's offset 0 is NO_MESSAGE_IN_QUEUE: the general read)
                            # the end: OFFSET_OVERFLOW_ONE, nextBeginOffset the offset (a slave's correction too)
                            self.stats.get_miss += 1
                            return GetMessageResult(
                                GetMessageStatus.OFFSET_OVERFLOW_ONE,
                                offset,
                                cq.min_logic_offset // CQ_STORE_UNIT_SIZE,
                                max_offset,
                            )
                    elif message_filter is None or getattr(message_filter, "matches_all", False) is True:
                        if behind == 1 and offset * CQ_STORE_UNIT_SIZE >= start:
                            result = self._get_last(cq, last, offset)
                        else:
                            result = self._get_tail(cq, last, offset, behind, max_msg_nums)
                        if result is not None:
                            return result
        return self._get_message(cq, max_offset, offset, max_msg_nums, message_filter)

    def get_woken_one(
        self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int
    ) -> tuple[memoryview, int] | GetMessageResult:
        """A match-everything pull's read when, as for a caught-up consumer's woken pull, the queue's last entry is
        ``offset`` (one message arrived): the record's view and the queue's min offset, with no result object (what
        `get_message` would answer, FOUND by `_get_last`: nextBeginOffset and maxOffset ``offset + 1``, one record,
        counted the same). Anything else is `get_message`'s result (a tuple or not: the caller tells by the class).

        (`get_message`'s prelude and `_get_last` in one frame, for the condition they reach `_get_last` on: a
        caught-up consumer's every message is one such read; tests/store/test_store_read_tail.py pins it against
        `get_message`.)"""
        if not self._loaded():  # (_ensure_readable, inlined)
            raise StoreNotReadableError("message store is not loaded or has shut down, so getMessage is forbidden")
        queues = self.dispatcher.consume_queue_table.get(topic)
        cq = None if queues is None else queues.get(queue_id)
        if cq is not None:
            files = cq.mapped_file_queue.mapped_files
            if files:
                last = files[-1]
                start = last.file_from_offset
                byte_offset = offset * CQ_STORE_UNIT_SIZE
                # (get_message's conditions for _get_last: one behind, in the last file, from the queue's minimum)
                if (
                    (start + last.wrote_position) // CQ_STORE_UNIT_SIZE == offset + 1
                    and byte_offset >= start
                    and byte_offset >= cq.min_logic_offset
                ):
                    phy, size, _tags = _CQ_ENTRY.unpack_from(last.view, byte_offset - start)
                    log_files = self.commit_log.mapped_file_queue.mapped_files
                    if size > 0 and log_files:
                        log_file = log_files[-1]
                        pos = phy - log_file.file_from_offset
                        if pos >= 0 and pos + size <= log_file.read_position and not log_file._closed:
                            stats = self.stats
                            stats.get_found += 1
                            stats.get_transferred += 1
                            return log_file.view[pos : pos + size], cq.min_logic_offset // CQ_STORE_UNIT_SIZE
        return self.get_message(group, topic, queue_id, offset, max_msg_nums, None)

    def _get_last(self, cq: ConsumeQueue, last: Any, offset: int) -> GetMessageResult | None:
        """A match-everything pull of the queue's last entry, in ``last``, its last file (a caught-up consumer's
        woken pull): the walk would take its record, whatever the transfer limits (`_take_one`), so this reads the
        entry with ``struct`` and selects the record from the commit log's last file, whose read position is also
        the commit log's max offset (the slave suggestion's). None for anything else (a record in an earlier
        commit-log file, removed, not readable): the general read answers it."""
        phy, size, _tags = _CQ_ENTRY.unpack_from(last.view, offset * CQ_STORE_UNIT_SIZE - last.file_from_offset)
        files = self.commit_log.mapped_file_queue.mapped_files
        if size <= 0 or not files:
            return None
        log_file = files[-1]
        pos = phy - log_file.file_from_offset
        # (`MappedFile.select`, inlined so the read position is read once: it is also the slave suggestion's)
        end = log_file.read_position
        if pos < 0 or pos + size > end or log_file._closed:  # (size > 0 above)
            return None
        view = log_file.view[pos : pos + size]
        stats = self.stats
        stats.get_found += 1
        stats.get_transferred += 1
        # (the result's fields set once each: its __init__ would make two lists for these two to replace)
        result = _new_object(GetMessageResult)
        result.status = _FOUND
        result.next_begin_offset = result.max_offset = offset + 1
        result.min_offset = cq.min_logic_offset // CQ_STORE_UNIT_SIZE
        result.buffers = [view]
        result.msg_queue_offsets = [offset]
        result.message_count = 1
        result.buffer_total_size = size
        # (the commit log's max offset less the record's: the last file's read position less its position there)
        memory = self._total_memory * self.config.access_message_in_memory_max_ratio // 100
        result.suggest_pulling_from_slave = end - pos > memory
        return result

    def _get_tail(
        self, cq: ConsumeQueue, last: Any, offset: int, behind: int, max_msg_nums: int
    ) -> GetMessageResult | None:
        """A match-everything pull ``behind`` (1-7) entries short of its queue's end, from the queue's minimum or
        later: the walk's first chunk would be these entries (at most ``maxMsgNums``, all in one queue file, or
        None here), read with ``struct`` from the queue file instead of a numpy view, then `_take_one` /
        `_take_few` as the walk's chunk would. None (nothing counted, nothing set) for anything else: the general
        read answers it."""
        max_offset = offset + behind
        n = behind if behind <= max_msg_nums else max(max_msg_nums, 1)
        byte_offset = offset * CQ_STORE_UNIT_SIZE
        # ``last``, the queue's last file, holds the tail unless that file has just been started
        mf = (
            last
            if last.file_from_offset <= byte_offset
            else cq.mapped_file_queue.find_mapped_file_by_offset(byte_offset)
        )
        if mf is None:
            return None
        pos = byte_offset - mf.file_from_offset
        if pos + n * CQ_STORE_UNIT_SIZE > mf.read_position:  # (entries in two queue files: the walk's case)
            return None
        result = GetMessageResult(GetMessageStatus.FOUND, offset, cq.min_logic_offset // CQ_STORE_UNIT_SIZE, max_offset)
        if n == 1:
            found = self._take_one(_CQ_ENTRY.unpack_from(mf.view, pos), offset, result)
        else:
            found = self._take_few(
                list(_CQ_ENTRY.iter_unpack(mf.view[pos : pos + n * CQ_STORE_UNIT_SIZE])), offset, result
            )
        if found is None:
            return None
        self.stats.get_found += 1
        result.next_begin_offset = found[1]
        return result

    def _get_message(
        self,
        cq: ConsumeQueue | None,
        max_offset: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None,
    ) -> GetMessageResult:
        """The general read: `get_message` of the queue ``cq`` (None: the topic has no such queue), whose max offset
        `get_message` has read already (``cq.get_max_offset_in_queue()``)."""
        begin = self.now_ms()
        status = GetMessageStatus.NO_MESSAGE_IN_QUEUE
        next_begin = offset
        min_offset = 0
        result = GetMessageResult(status, offset, 0, 0)
        if cq is None:
            status = GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
            next_begin = self._next_offset_correction(offset, 0)
        else:
            min_offset = cq.get_min_offset_in_queue()
            if max_offset == 0:
                status = GetMessageStatus.NO_MESSAGE_IN_QUEUE
                next_begin = self._next_offset_correction(offset, 0)
            elif offset < min_offset:
                status = GetMessageStatus.OFFSET_TOO_SMALL
                next_begin = self._next_offset_correction(offset, min_offset)
            elif offset == max_offset:
                status = GetMessageStatus.OFFSET_OVERFLOW_ONE
                next_begin = self._next_offset_correction(offset, offset)
            elif offset > max_offset:
                status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
                next_begin = self._next_offset_correction(offset, max_offset)
            else:
                status, next_begin = self._read_queue(cq, offset, max_msg_nums, message_filter, result)
        if status == GetMessageStatus.FOUND:
            self.stats.get_found += 1
        else:
            self.stats.get_miss += 1
        self.stats.get_time(self.now_ms() - begin)
        result.status = status
        result.next_begin_offset = next_begin
        result.min_offset = min_offset
        result.max_offset = max_offset
        return result

    def _read_queue(
        self,
        cq: ConsumeQueue,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None,
        result: GetMessageResult,
    ) -> tuple[GetMessageStatus, int]:
        """Walk the consume queue from `offset` (upstream reads up to 16,000 bytes of it at once).

        A filter that matches everything needs no look-ahead, so its entries are read in chunks of
        `max_msg_nums` (a drain pull reads 32 entries, not 800); the walk itself, and so the answer and
        nextBeginOffset, is the same as over one window of `max_entries`."""
        max_entries = max(16000, max_msg_nums * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE
        code_set: Any = None
        vector = False
        matches_all = message_filter is None or getattr(message_filter, "matches_all", False) is True
        if message_filter is not None and not matches_all:
            get_codes = getattr(message_filter, "tags_code_set", None)
            if get_codes is not None:
                vector = True
                code_set = get_codes()
        chunk = min(max_entries, max(max_msg_nums, 1)) if matches_all else max_entries
        entries = cq.get_entries(offset, chunk)
        if entries is None:
            return GetMessageStatus.OFFSET_FOUND_NULL, self._next_offset_correction(offset, cq.roll_next_file(offset))
        if matches_all:
            n = len(entries)
            if n >= TAKE_ALL_MIN_ENTRIES:
                found = self._take_all(entries, offset, result)
                if found is not None:
                    return found
            elif n == 1:
                found = self._take_one(entries[0].tolist(), offset, result)
                if found is not None:
                    return found
            else:
                found = self._take_few(entries.tolist(), offset, result)
                if found is not None:
                    return found
        cfg = self.config
        commit_log = self.commit_log
        max_phy = commit_log.get_max_offset()
        memory = self._total_memory * cfg.access_message_in_memory_max_ratio // 100
        max_count_disk = cfg.max_transfer_count_on_message_in_disk
        max_bytes_disk = cfg.max_transfer_bytes_on_message_in_disk
        max_count_memory = cfg.max_transfer_count_on_message_in_memory
        max_bytes_memory = cfg.max_transfer_bytes_on_message_in_memory
        find_file = commit_log.mapped_file_queue.find_mapped_file_by_offset
        file_size = commit_log.mapped_file_size
        mf: Any = None
        mf_from = mf_to = -1  # the commit-log file of the previous record (consecutive records share one)
        # Once a record of that file was selected, the next ones below its read position (which only grows) are
        # cut from its view here, without a select() call each: a drain pull of 32 made 32 of them.
        mf_view: Any = None
        mf_readable = -1  # commit-log offset up to which mf_view may be cut
        append_buffer = result.buffers.append
        append_queue_offset = result.msg_queue_offsets.append
        entries_per_file = cq.entries_per_file
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        next_phy_file_start = -1
        total_size = 0
        count = 0
        max_phy_pulling = 0
        i = 0  # entries walked, over all chunks
        while True:
            rows = entries.tolist()  # [(commitLogOffset, size, tagsCode)]: one conversion, not one per column
            if matches_all:
                matched: list[bool] | None = None
            elif vector:
                if code_set is None:
                    matched = None
                else:
                    codes = np.fromiter(code_set, dtype=np.int32, count=len(code_set))
                    matched = np.isin(tags_to_int32(entries["tags"]), codes).tolist()
            else:
                matched = [message_filter.is_matched_by_consume_queue(row[2]) for row in rows]  # type: ignore[union-attr]
            full = False
            for j, (offset_py, size_py, _tags) in enumerate(rows):
                max_phy_pulling = offset_py
                if next_phy_file_start != -1 and offset_py < next_phy_file_start:
                    i += 1
                    continue
                if count:
                    # isTheBatchFull (the first message is always taken)
                    if max_msg_nums <= count:
                        full = True
                        break
                    if max_phy - offset_py > memory:
                        if total_size + size_py > max_bytes_disk or count > max_count_disk - 1:
                            full = True
                            break
                    elif total_size + size_py > max_bytes_memory or count > max_count_memory - 1:
                        full = True
                        break
                if matched is not None and not matched[j]:
                    if not total_size:
                        status = GetMessageStatus.NO_MATCHED_MESSAGE
                    i += 1
                    continue
                if mf_from <= offset_py and offset_py + size_py <= mf_readable and size_py > 0:
                    view = mf_view[offset_py - mf_from : offset_py - mf_from + size_py]
                else:
                    if not mf_from <= offset_py < mf_to:
                        mf = find_file(offset_py)
                        mf_readable = -1  # the fast cut above is only for a view select() has just vouched for
                        if mf is None:
                            mf_from = mf_to = -1
                        else:
                            mf_from = mf.file_from_offset
                            mf_to = mf_from + file_size
                    view = mf.select(offset_py - mf_from, size_py) if mf is not None else None
                    if view is not None:  # select checked the file is open: cut the next records here
                        mf_view = mf.view
                        mf_readable = mf_from + mf.read_position
                if view is None:
                    if not total_size:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    next_phy_file_start = commit_log.roll_next_file(offset_py)
                    i += 1
                    continue
                if not matches_all and not message_filter.is_matched_by_commit_log(view, None):  # type: ignore[union-attr]
                    if not total_size:
                        status = GetMessageStatus.NO_MATCHED_MESSAGE
                    i += 1
                    continue
                append_buffer(view)
                append_queue_offset(offset + i)
                total_size += size_py
                count += 1
                status = GetMessageStatus.FOUND
                next_phy_file_start = -1
                i += 1
            # Read on only where one window of max_entries would have gone on: this chunk was cut short by
            # `chunk` alone, not by the batch filling up, the end of what is written or the queue file's end.
            if full or count >= max_msg_nums or len(rows) < chunk or i >= max_entries:
                break
            if (offset + i) % entries_per_file == 0:
                break
            entries = cq.get_entries(offset + i, min(chunk, max_entries - i))
            if entries is None:
                break
        result.message_count = count
        result.buffer_total_size = total_size
        self.stats.get_transferred += count
        result.suggest_pulling_from_slave = max_phy - max_phy_pulling > memory
        return status, offset + i

    def _take_all(self, entries: Any, offset: int, result: GetMessageResult) -> tuple[GetMessageStatus, int] | None:
        """`_read_queue`'s walk when a filter matching everything takes every entry of the first chunk, in C-level
        list operations instead of a Python loop over the records (a drain pull of 32 walked ~100 bytecodes per
        record). It applies when the entries' records all lie in one commit-log file below its read position and
        within the in-memory transfer limits: then the walk takes them all (the chunk is at most `max_msg_nums`
        entries) and stops there. Anything else returns None and the walk handles it, with the same answer."""
        phys = entries["offset"].tolist()  # two column conversions cost a third of one of the structured rows
        sizes = entries["size"].tolist()
        if min(sizes) <= 0:
            return None
        ends = list(map(add, phys, sizes))
        if ends[:-1] == phys[1:]:  # back to back (a batch sent to this queue): one view, no cuts (see _take_span)
            return self._take_span(result, offset, None, len(phys), sum(sizes), phys[0], ends[-1], phys[-1], sizes)
        # the entries of one queue ascend; min and max keep the span check right if they did not
        return self._take_span(result, offset, zip(phys, ends), len(phys), sum(sizes), min(phys), max(ends), phys[-1])

    def _take_one(
        self, entry: tuple[int, int, int], offset: int, result: GetMessageResult
    ) -> tuple[GetMessageStatus, int] | None:
        """`_read_queue`'s walk over the one entry a match-everything pull found (a consumer that keeps up with its
        producer pulls one message at a time): the first record is always taken, whatever the transfer limits, and
        one entry ends the walk, so this is one `select()` of its record; anything but a readable record of a
        positive size (removed, not yet readable) returns None and the walk answers it."""
        phy, size, _tags = entry
        if size <= 0:
            return None
        mfq = self.commit_log.mapped_file_queue
        files = mfq.mapped_files
        if not files:
            return None
        # The last commit-log file holds a caught-up consumer's record; its read position is also the commit log's
        # max offset (CommitLog.get_max_offset), which the slave suggestion needs. (A record past that file's end
        # fails select() there as it would fail the lookup.)
        last = files[-1]
        mf = last if last.file_from_offset <= phy else mfq.find_mapped_file_by_offset(phy)
        view = mf.select(phy - mf.file_from_offset, size) if mf is not None else None
        if view is None:
            return None
        result.buffers.append(view)
        result.msg_queue_offsets.append(offset)
        result.message_count = 1
        result.buffer_total_size = size
        self.stats.get_transferred += 1
        memory = self._total_memory * self.config.access_message_in_memory_max_ratio // 100
        result.suggest_pulling_from_slave = last.file_from_offset + last.read_position - phy > memory
        return GetMessageStatus.FOUND, offset + 1

    def _take_few(
        self, rows: list[tuple[int, int, int]], offset: int, result: GetMessageResult
    ) -> tuple[GetMessageStatus, int] | None:
        """`_take_all` for a chunk of 2 to 7 entries (a consumer that follows its producer closely): the same
        conditions and answer, read from the structured rows' one `tolist()` (below 8 entries that is cheaper than
        two column conversions and the list passes over them) and checked in one short loop; the records must
        ascend without overlapping (they do within a queue), so the span from the first one's start to the last
        one's end holds them all. ``rows``: the entries as (commitLogOffset, size, tagsCode)."""
        lo = end = rows[0][0]
        total = 0
        bounds = []
        for phy, size, _tags in rows:
            if size <= 0 or phy < end:
                return None
            end = phy + size
            total += size
            bounds.append((phy, end))
        if total == end - lo:  # ascending without gaps: back to back
            return self._take_span(result, offset, None, len(rows), total, lo, end, rows[-1][0], [r[1] for r in rows])
        return self._take_span(result, offset, bounds, len(rows), total, lo, end, rows[-1][0])

    def _take_span(
        self,
        result: GetMessageResult,
        offset: int,
        bounds: Iterable[tuple[int, int]] | None,
        n: int,
        total: int,
        lo: int,
        end: int,
        last_phy: int,
        sizes: list[int] | None = None,
    ) -> tuple[GetMessageStatus, int] | None:
        """What `_take_all` and `_take_few` share once their entries are read: the walk's limits (a record on disk,
        or more than the in-memory transfer limits past the first record, goes to the walk), then every record
        cut from one `select()` of the commit-log span ``lo``..``end`` (start and end of each in ``bounds``).

        ``bounds`` None and ``sizes`` each record's size instead: the records lie back to back, so the span is all of them and the result
        keeps it whole (`GetMessageResult.span`): a drain pull of a batched backlog answers it as its body without
        32 cuts (~480 bytecodes, ~9 us) and a join; whoever wants the records one by one gets them cut lazily."""
        cfg = self.config
        commit_log = self.commit_log
        max_phy = commit_log.get_max_offset()
        memory = self._total_memory * cfg.access_message_in_memory_max_ratio // 100
        if max_phy - lo > memory or (  # a record on disk: the disk limits apply to it
            n > 1
            and (n > cfg.max_transfer_count_on_message_in_memory or total > cfg.max_transfer_bytes_on_message_in_memory)
        ):
            return None
        mf = commit_log.mapped_file_queue.find_mapped_file_by_offset(lo)
        span = mf.select(lo - mf.file_from_offset, end - lo) if mf is not None else None  # readable and open
        if span is None:
            return None
        if bounds is None:
            result.set_span(span, sizes)  # type: ignore[arg-type]
        else:
            # a comprehension: map(span.__getitem__, map(slice, ...)) measured twice as slow
            result.buffers = [span[a - lo : b - lo] for a, b in bounds]
        result.msg_queue_offsets = list(range(offset, offset + n))
        result.message_count = n
        result.buffer_total_size = total
        self.stats.get_transferred += n
        result.suggest_pulling_from_slave = max_phy - last_phy > memory
        return GetMessageStatus.FOUND, offset + n

    def _ensure_readable(self, what: str) -> None:
        if not self._loaded():
            raise StoreNotReadableError(f"message store is not loaded or has shut down, so {what} is forbidden")

    def _next_offset_correction(self, old: int, new: int) -> int:
        if self.config.broker_role != BrokerRole.SLAVE or self.config.offset_check_in_slave:
            return new
        return old

    # ------------------------------------------------------------------------------------ offsets API
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.dispatcher.get_consume_queue(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.dispatcher.get_consume_queue(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else -1

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.dispatcher.get_consume_queue(topic, queue_id)
        if cq is not None:
            entry = cq.get_entry(cq_offset)
            if entry is not None:
                return entry[0]
        return 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, ts_ms: int) -> int:
        cq = self.dispatcher.get_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(
            ts_ms, self.commit_log.pickup_store_timestamp, self.commit_log.get_min_offset()
        )

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.dispatcher.get_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        entry = cq.get_entry(cq.get_min_offset_in_queue())
        if entry is None:
            return -1
        return self.commit_log.pickup_store_timestamp(entry[0], entry[1])

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.dispatcher.get_consume_queue(topic, queue_id)
        entry = cq.get_entry(cq_offset) if cq is not None else None
        if entry is None:
            return -1
        return self.commit_log.pickup_store_timestamp(entry[0], entry[1])

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.dispatcher.get_consume_queue(topic, queue_id)
        return cq.get_message_total_in_queue() if cq is not None else -1

    def look_message_by_offset(self, phy_offset: int) -> MessageExt | None:
        record = self.select_one_message_by_offset(phy_offset)
        if record is None:
            return None
        try:
            return decode_record(record)
        except RecordError:
            return None

    def select_one_message_by_offset(self, phy_offset: int) -> memoryview | None:
        """The raw record at `phy_offset` (a view into the mapping) or None."""
        self._ensure_readable("selectOneMessageByOffset")
        head = self.commit_log.get_message(phy_offset, 8)
        if head is None:
            return None
        size = int.from_bytes(head[:4], "big", signed=True)
        if size < 91 or int.from_bytes(head[4:8], "big", signed=True) != MESSAGE_MAGIC_CODE:
            return None
        return self.commit_log.get_message(phy_offset, size)

    # -------------------------------------------------------------------------------------- querying
    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryMessageResult:
        """Messages of `topic` whose KEYS or UNIQ_KEY contain `key`, stored within [begin, end]
        (upstream queryMessage: up to three rounds over the index, newest first)."""
        self._ensure_readable("queryMessage")
        out = QueryMessageResult()
        if not self.config.message_index_enable:
            return out
        self.dispatcher.build_index_keys()  # keys of puts that already returned
        last_query_time = end_ms
        seen: set[int] = set()
        for _ in range(3):
            offsets, last_ts, last_phy = self.index_service.query_offset(topic, key, max_num, begin_ms, last_query_time)
            if not offsets:
                break
            offsets.sort()
            out.index_last_update_timestamp = last_ts
            out.index_last_update_phyoffset = last_phy
            for m, phy in enumerate(offsets):
                if phy in seen:
                    continue
                record = self.select_one_message_by_offset(phy)
                if record is None:
                    continue
                try:
                    msg = decode_record(record, read_body=False)
                except RecordError:
                    continue
                if m == 0:
                    last_query_time = msg.store_timestamp
                # the index is a hash: make sure this record really carries the key (and the topic)
                if msg.topic != topic or not _has_key(msg, key):
                    continue
                seen.add(phy)
                out.buffers.append(record)
                out.buffer_total_size += len(record)
            if out.buffer_total_size > 0 or last_query_time < begin_ms:
                break
        return out


def _has_key(msg: MessageExt, key: str) -> bool:
    if msg.properties.get(MessageConst.UNIQ_KEY) == key:
        return True
    keys = msg.properties.get(MessageConst.KEYS)
    return bool(keys) and key in keys.split(MessageConst.KEY_SEPARATOR)
