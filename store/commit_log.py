"""CommitLog: the single append-only log every message goes to, and its single writer.

Producers (`MessageStore.put_message[s]`) encode their records outside the lock and hand them to the
writer. The writer task drains everything handed over in one go under the append "lock" section:
for each request it records `begin_time_in_lock`, assigns queue offsets from the topic-queue table,
physical offsets and the store timestamp, and copies the bytes into the mapped file (or the transient
pool buffer). A record that does not fit with 8 spare bytes ends the file with a BLANK filler and goes
to the next file, created ahead of time in a worker thread. The section awaits only for a file that is
not ready yet or for an injected stall, so the event loop keeps running and the busy signals can be
observed. The module also parses records back (reput, recovery) and finds the valid end of the log
after a crash.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np
import structlog

from store.config import OS_PAGE_SIZE, MessageStoreConfig
from store.fault import StoreFault
from store.java_hash import JavaHasher, abs_hashes, combine, java_string_hash
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue, RunBlocking
from store.message import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    FIXED_PART,
    FIXED_PART_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    POS_STORE_TIMESTAMP,
    RMQ_SYS_SCHEDULE_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageConst,
    MessageExtBrokerInner,
    RecordEncoder,
    crc32,
    decode_properties,
    join_offset_msg_ids,
    offset_msg_id_prefix,
    tags_hash,
    transaction_value,
)
from store.results import AppendMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from store.prefault import PrefaultService

log = structlog.get_logger(__name__)

_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_LONG = struct.Struct(">q")
_BLANK = struct.Struct(">ii")
# TOTALSIZE, MAGIC, BODYCRC, BODYLEN: what the recovery scan needs of the fixed part, in one unpack
_VERIFY = struct.Struct(">iii72xi")
assert _VERIFY.size == FIXED_PART_LENGTH
# the fixed part as numpy sees it (the bulk parser gathers it for many records at once)
RECORD_DTYPE = np.dtype(
    [
        ("total", ">i4"),
        ("magic", ">i4"),
        ("crc", ">i4"),
        ("queue_id", ">i4"),
        ("flag", ">i4"),
        ("queue_offset", ">i8"),
        ("phy", ">i8"),
        ("sys_flag", ">i4"),
        ("born_ts", ">i8"),
        ("born_host", "V8"),
        ("store_ts", ">i8"),
        ("store_host", "V8"),
        ("reconsume", ">i4"),
        ("prepared", ">i8"),
        ("body_len", ">i4"),
    ]
)
assert RECORD_DTYPE.itemsize == FIXED_PART_LENGTH
BULK_RECORDS = 32768  # records per bulk parse (bounds the temporary arrays; the reput yields between)
_PROPERTY_NAMES = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY")
MAX_DRAIN = 4096  # requests per lock section; bounds the time the section can take


@dataclass(slots=True)
class DispatchRequest:
    """What the reput hands to the consume queue and index builders (upstream DispatchRequest)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties: dict[str, str] | None


@dataclass(slots=True)
class AppendRequest:
    """One put (one message, or one batch of one topic/queue): the messages and what was computed for
    them outside the lock (`RecordEncoder.plan`); the writer encodes them straight into the file."""

    msgs: list[MessageExtBrokerInner]
    tails: list[bytes]
    crcs: list[int]
    sizes: list[int]
    total: int  # bytes of all records
    topic: str
    queue_id: int
    sys_flag: int
    prepared_transaction_offset: int
    store_host: tuple[str, int]
    stall_ms: int
    future: asyncio.Future | None  # only for a request queued to the writer
    batch: bool = False
    phys: list[int] | None = None  # CommitLog offset of each record, once appended (batches only)


@dataclass(slots=True)
class DispatchBatch:
    """What the reput needs to dispatch a whole batch the writer appended where it could not dispatch it
    at once (a transient pool buffer: readable only once committed): one descriptor instead of a
    DispatchRequest per record. `commit_log_offset` and `msg_size` cover all its records."""

    request: AppendRequest
    commit_log_offset: int
    msg_size: int
    consume_queue_offset: int
    store_timestamp: int


# Dispatches records the writer just appended, while the reput is caught up: (request, first CommitLog
# offset, first queue offset, store timestamp) → how many records it dispatched (the rest go to the reput)
InlineDispatch = Callable[[AppendRequest, int, int, int], int]


@dataclass(slots=True)
class ParsedRecords:
    """Dispatch facts of consecutive records, as arrays (the bulk reput: recovery, rebuilds)."""

    phy: np.ndarray  # int64 CommitLog offsets
    size: np.ndarray  # int64
    queue_id: np.ndarray  # int64
    queue_offset: np.ndarray  # int64
    sys_flag: np.ndarray  # int64
    store_ts: np.ndarray  # int64
    tags_code: np.ndarray  # int64 (the delivery time in the schedule topic)
    topic_id: np.ndarray  # int64 index into topics
    topics: list[str]
    key_record: np.ndarray  # int64: the record of each index key, in index order
    key_hash: np.ndarray  # int64: its index hash, abs(String.hashCode(topic + "#" + key))
    props: list[bytes]  # raw properties (decoded only when an arrival listener needs them)

    def __len__(self) -> int:
        return len(self.phy)


@dataclass(slots=True)
class AppendFailure:
    status: PutMessageStatus
    remark: str


@dataclass(slots=True)
class RecoveryReport:
    process_offset: int
    dropped_bytes: int = 0
    scanned_bytes: int = 0
    records: int = 0
    start_file: str = ""


class CommitLog:
    def __init__(
        self,
        config: MessageStoreConfig,
        *,
        now_ms: Callable[[], int],
        run_blocking: RunBlocking | None,
        fault: StoreFault,
        on_new_file: Callable[[MappedFile], None] | None = None,
        unlink: Callable[[str], object] | None = None,
    ) -> None:
        self.config = config
        self.now_ms = now_ms
        self.fault = fault
        self.mapped_file_size = config.mapped_file_size_commit_log
        assert config.store_path_commit_log is not None
        self.mapped_file_queue = MappedFileQueue(
            config.store_path_commit_log,
            config.mapped_file_size_commit_log,
            run_blocking=run_blocking,
            preallocate=config.preallocate_mapped_file,
            warm=config.warm_mapped_file_enable,
            allocate_ahead=True,
            on_new_file=on_new_file,
            unlink=unlink,
        )
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.begin_time_in_lock = 0
        self.dispatch_queue: deque[DispatchRequest | DispatchBatch] = deque()
        self.post_append: Callable[[], Awaitable[None]] | None = None
        self.inline_dispatch: InlineDispatch | None = None
        # the recovery scan calls this with each run of records it accepted: (file offset, view, positions)
        self.on_verified: Callable[[int, memoryview, list[int]], None] | None = None
        self._stage = memoryview(bytearray(1024 * 1024))
        # woken when an append ends at or past its wake_offset (store.prefault); None when off
        self.prefault: PrefaultService | None = None
        self.encoder = RecordEncoder()
        # the bulk parser keeps each record's raw properties only when someone will read them
        self.want_raw_props: Callable[[], bool] = lambda: False
        # record positions per file (start offset) found by the recovery scan, for the replay after it
        self.recovered_positions: dict[int, np.ndarray] = {}
        self._pending: deque[AppendRequest] = deque()
        self._wake = asyncio.Event()
        self._writer_task: asyncio.Task | None = None
        self._in_section = False  # the writer is between taking requests and answering them
        self._closed = False
        self._id_prefix: dict[tuple[str, int], str] = {}
        self._delay_levels = config.delay_levels_ms()
        self.tags_cache: dict[str | None, int] = {None: 0, "": 0}  # TAGS value → consume-queue tags code
        # statistics read by runtime_info
        self.put_message_times_total = 0
        self.put_message_size_total = 0
        self.lock_time_max_ms = 0

    # ------------------------------------------------------------------------------------- properties
    def get_max_offset(self) -> int:
        return self.mapped_file_queue.max_offset()

    def get_min_offset(self) -> int:
        mf = self.mapped_file_queue.first_mapped_file()
        if mf is None:
            return -1
        if mf.is_available():
            return mf.file_from_offset
        return self.roll_next_file(mf.file_from_offset)

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    def lock_time_mills(self) -> int:
        begin = self.begin_time_in_lock
        if begin <= 0:
            return 0
        return max(0, self.now_ms() - begin)

    # ------------------------------------------------------------------------------------------ reads
    def get_message(self, offset: int, size: int) -> memoryview | None:
        # no "first file when not found" fallback (upstream does it for offset 0): once the file of
        # offset 0 expired, that would hand out the first record of another file
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        return mf.select(offset % self.mapped_file_size, size)

    def get_data(self, offset: int) -> tuple[int, memoryview] | None:
        """(start offset, view to the readable end of its file) — the reput reads in file-sized chunks."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset % self.mapped_file_size
        view = mf.select_from(pos)
        if view is None:
            return None
        return mf.file_from_offset + pos, view

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        if offset >= self.get_min_offset():
            view = self.get_message(offset, max(size, POS_STORE_TIMESTAMP + 8))
            if view is not None:
                return _LONG.unpack_from(view, POS_STORE_TIMESTAMP)[0]
        return -1

    # -------------------------------------------------------------------------------------- the writer
    def start(self) -> None:
        if self._writer_task is None:
            self._closed = False
            self._writer_task = asyncio.get_running_loop().create_task(self._writer_loop(), name="commitlog-writer")

    async def stop(self) -> None:
        """Let the writer finish what it was handed, then stop it."""
        self._closed = True
        task = self._writer_task
        self._writer_task = None
        if task is not None:
            self._wake.set()
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=10)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
        while self._pending:
            req = self._pending.popleft()
            if req.future is not None and not req.future.done():
                req.future.set_result(AppendFailure(PutMessageStatus.SERVICE_NOT_AVAILABLE, "store is shutting down"))

    def submit(self, req: AppendRequest) -> None:
        assert req.future is not None
        if self._closed or self._writer_task is None:
            req.future.set_result(AppendFailure(PutMessageStatus.SERVICE_NOT_AVAILABLE, "store is not running"))
            return
        self._pending.append(req)
        self._wake.set()

    def append_now(self, req: AppendRequest) -> AppendMessageResult | None:
        """The whole append section on the caller's stack (no future, no hop to the writer task) when
        the writer is idle: nothing queued, no section open, no stall, the file has room. None → queue
        the request (`submit`). Order is kept: anything queued before goes first."""
        if self._pending or self._in_section or self._closed or self._writer_task is None:
            return None
        try:
            return self._append_fast(req)  # None after writing a BLANK: the next file may need an await
        finally:
            self.begin_time_in_lock = 0

    async def _writer_loop(self) -> None:
        while True:
            if not self._pending:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            done: list[tuple[AppendRequest, AppendMessageResult | AppendFailure]] = []
            self._in_section = True
            try:
                while self._pending and len(done) < MAX_DRAIN:
                    req = self._pending.popleft()
                    result = self._append_fast(req)
                    if result is None:
                        try:
                            result = await self._append_slow(req)
                        except Exception as exc:  # never lose the writer to one bad request
                            log.exception("append failed", topic=req.topic)
                            result = AppendFailure(PutMessageStatus.UNKNOWN_ERROR, f"append failed: {exc}")
                    done.append((req, result))
            finally:
                self.begin_time_in_lock = 0
            if self.post_append is not None:
                try:
                    await self.post_append()
                except Exception:
                    log.exception("dispatch after append failed")
            self._in_section = False
            for req, result in done:
                if req.future is not None and not req.future.done():
                    req.future.set_result(result)

    def _append_fast(self, req: AppendRequest) -> AppendMessageResult | AppendFailure | None:
        """The whole append when no await is needed; None → take the slow path."""
        if req.stall_ms > 0 or self.fault.stall_append_until_ms:
            return None
        mf = self.mapped_file_queue.last_mapped_file()
        if mf is None or mf.is_full():
            return None
        now = self.now_ms()
        self.begin_time_in_lock = now
        result = self._do_append(mf, req, now)
        if result is None:  # END_OF_FILE: the blank is written, the next file may need an await
            return None
        self._account(now)
        return result

    async def _append_slow(self, req: AppendRequest) -> AppendMessageResult | AppendFailure:
        begin = self.now_ms()
        self.begin_time_in_lock = begin
        stall = max(req.stall_ms, self.fault.stall_append_remaining_ms(begin))
        if stall > 0:
            # fault injection: hold the section without blocking the loop, so sweepers see the busy lock
            await asyncio.sleep(stall / 1000)
        for _attempt in range(2):
            try:
                mf = await self.mapped_file_queue.get_last_mapped_file_async(0)
            except OSError as exc:
                log.error("create mapped file failed", error=str(exc), topic=req.topic)
                return AppendFailure(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, f"create mapped file failed: {exc}")
            result = self._do_append(mf, req, begin)
            if result is not None:
                self._account(begin)
                return result
        return AppendFailure(PutMessageStatus.UNKNOWN_ERROR, "the message does not fit in an empty CommitLog file")

    def _account(self, begin: int) -> None:
        elapsed = self.now_ms() - begin
        self.lock_time_max_ms = max(self.lock_time_max_ms, elapsed)
        if elapsed > 500:
            log.warning("putMessage in lock cost time(ms)", elapsed_ms=elapsed)

    def _staging(self, size: int) -> memoryview:
        """The reused buffer records are encoded into before a pwrite (grown to the largest request)."""
        if len(self._stage) < size:
            self._stage = memoryview(bytearray(max(size, 2 * len(self._stage))))
        return self._stage

    def _do_append(
        self, mf: MappedFile, req: AppendRequest, store_ts: int
    ) -> AppendMessageResult | AppendFailure | None:
        """Write `req` at the end of `mf`; None after writing the BLANK filler (no room), an AppendFailure
        when the file refused the bytes (disk full, I/O error)."""
        pos = mf.wrote_position
        total = req.total
        max_blank = mf.file_size - pos
        view = mf.write_view
        if total + END_FILE_MIN_BLANK_LENGTH > max_blank:
            _BLANK.pack_into(view, pos, max_blank, BLANK_MAGIC_CODE)
            if mf.write_buffer is not None and max_blank > 8:
                view[pos + 8 : mf.file_size] = bytes(max_blank - 8)  # pool buffers are reused: no stale bytes
            mf.wrote_position = mf.file_size
            return None
        key = (req.topic, req.queue_id)
        table = self.topic_queue_table
        queue_offset = table.get(key, 0)
        tran = transaction_value(req.sys_flag)
        counts = tran != TRANSACTION_PREPARED_TYPE and tran != TRANSACTION_ROLLBACK_TYPE
        if not counts:
            queue_offset = 0
        wrote_offset = mf.file_from_offset + pos
        prefix = self._id_prefix.get(req.store_host)
        if prefix is None:
            prefix = self._id_prefix[req.store_host] = offset_msg_id_prefix(*req.store_host)
        msgs = req.msgs
        n = len(msgs)
        # Where the mapping is not populated yet, a copy into it faults on every page, and the fault
        # zero-fills the hole (with readahead, many pages at a time) on this thread: ~8 us per 4 KiB.
        # pwrite of the same bytes skips the zeroing of whole pages: the records are encoded into a
        # reused staging buffer and written with one syscall (the mapping sees them: one page cache).
        staged = mf.write_buffer is None and total >= OS_PAGE_SIZE and pos + total > mf.prefaulted_position
        target, at = (self._staging(total), 0) if staged else (view, pos)
        phys = self.encoder.write_many(
            target, at, msgs, req.tails, req.crcs, req.sizes, queue_offset, 1 if counts else 0, wrote_offset, store_ts
        )
        if n > 1:
            req.phys = phys  # the batch dispatch (one pass) reads them
        if staged:
            try:
                mf.write_at(target[:total], pos)
            except OSError as exc:
                # nothing is published: the write position, queue offsets and dispatch stay as they were
                log.error("write to the CommitLog failed", error=str(exc), file=mf.file_name, position=pos)
                req.phys = None
                return AppendFailure(PutMessageStatus.UNKNOWN_ERROR, f"write to the CommitLog failed: {exc}")
        qo = queue_offset + n
        mf.wrote_position = pos + total
        mf.store_timestamp = store_ts
        pf = self.prefault
        if pf is not None and wrote_offset + total >= pf.wake_offset:
            pf.wakeup()
        if counts:
            table[key] = qo
        self.put_message_times_total += n
        self.put_message_size_total += total
        # the consume queue entries, index keys and arrival notices: inline when the reput is caught up
        # and the bytes are readable (no pool buffer), else described for the reput
        done = 0
        if self.inline_dispatch is not None and mf.write_buffer is None:
            done = self.inline_dispatch(req, wrote_offset, queue_offset, store_ts)
        if done < n:
            if done == 0 and n > 1 and counts:
                # one descriptor for the whole batch: the reput dispatches it in one pass once committed
                self.dispatch_queue.append(DispatchBatch(req, wrote_offset, total, queue_offset, store_ts))
            else:
                self.dispatch_queue.extend(self.describe(req, done, wrote_offset, queue_offset, store_ts, counts))
        return AppendMessageResult(
            wrote_offset=wrote_offset,
            wrote_bytes=total,
            msg_id=join_offset_msg_ids(prefix, phys),
            store_timestamp=store_ts,
            logics_offset=queue_offset,
            msg_num=n,
        )

    def expand(self, batch: DispatchBatch) -> list[DispatchRequest]:
        """The DispatchRequests of a batch descriptor, for the reput's record-by-record path."""
        return self.describe(
            batch.request, 0, batch.commit_log_offset, batch.consume_queue_offset, batch.store_timestamp, True
        )

    def describe(
        self, req: AppendRequest, start: int, wrote_offset: int, queue_offset: int, store_ts: int, counts: bool
    ) -> list[DispatchRequest]:
        """DispatchRequests for records start.. of `req` (so that the reput need not parse them)."""
        sizes = req.sizes
        phy = wrote_offset + sum(sizes[:start])
        qo = queue_offset + start if counts else queue_offset
        out: list[DispatchRequest] = []
        topic = req.topic
        for i in range(start, len(req.msgs)):
            props = req.msgs[i].properties
            size = sizes[i]
            out.append(
                DispatchRequest(
                    topic,
                    req.queue_id,
                    phy,
                    size,
                    self.dispatch_tags_code(topic, props, store_ts),
                    store_ts,
                    qo,
                    props.get(MessageConst.KEYS),
                    props.get(MessageConst.UNIQ_KEY),
                    req.sys_flag,
                    req.prepared_transaction_offset,
                    props,
                )
            )
            phy += size
            if counts:
                qo += 1
        return out

    def dispatch_tags_code(self, topic: str, props: dict[str, str], store_ts: int) -> int:
        """Consume-queue tags code: the TAGS hash, or the delivery time in the schedule topic."""
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            level = _int_or_zero(props.get(MessageConst.DELAY))
            if level > 0:
                return self.compute_deliver_timestamp(level, store_ts)
        return self.tags_code_of(props.get(MessageConst.TAGS))

    def compute_deliver_timestamp(self, delay_level: int, store_ts: int) -> int:
        """ScheduleMessageService.computeDeliverTimestamp: the tags code of a delayed message."""
        level = min(delay_level, len(self._delay_levels))
        return store_ts + self._delay_levels[level - 1] if level > 0 else store_ts + 1000

    @property
    def max_delay_level(self) -> int:
        return len(self._delay_levels)

    # ---------------------------------------------------------------------------------------- parsing
    def parse_dispatch(self, view: memoryview, pos: int, check_crc: bool) -> tuple[int, DispatchRequest | None]:
        """(size, request) of the record at `pos`: size > 0 a message, 0 the BLANK end of a file,
        -1 not a valid record (upstream checkMessageAndReturnSize)."""
        if pos + 8 > len(view):
            return -1, None
        total, magic = _BLANK.unpack_from(view, pos)
        if magic == BLANK_MAGIC_CODE:
            return 0, None
        if magic != MESSAGE_MAGIC_CODE or total < 91 or pos + total > len(view):
            return -1, None
        (
            _total,
            _magic,
            crc,
            queue_id,
            _flag,
            queue_offset,
            phy,
            sys_flag,
            _born_ts,
            _born_ip,
            _born_port,
            store_ts,
            _store_ip,
            _store_port,
            _reconsume,
            prepared,
            body_len,
        ) = FIXED_PART.unpack_from(view, pos)
        if body_len < 0 or FIXED_PART_LENGTH + body_len + 3 > total:
            return -1, None
        p = pos + FIXED_PART_LENGTH
        if check_crc and (crc32(view[p : p + body_len]) & 0x7FFFFFFF) != crc:
            log.warning("CRC check failed", offset=phy)
            return -1, None
        p += body_len
        topic_len = view[p]
        p += 1
        topic = bytes(view[p : p + topic_len]).decode("utf-8", errors="replace")
        p += topic_len
        (props_len,) = _SHORT.unpack_from(view, p)
        p += 2
        if props_len < 0 or 91 + body_len + topic_len + props_len != total:
            return -1, None
        props = decode_properties(bytes(view[p : p + props_len]).decode("utf-8", errors="replace")) if props_len else {}
        tags = props.get(MessageConst.TAGS)
        tags_code = self.tags_code_of(tags)
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            level = _int_or_zero(props.get(MessageConst.DELAY))
            if level > 0:
                tags_code = self.compute_deliver_timestamp(min(level, self.max_delay_level), store_ts)
        return total, DispatchRequest(
            topic,
            queue_id,
            phy,
            total,
            tags_code,
            store_ts,
            queue_offset,
            props.get(MessageConst.KEYS),
            props.get(MessageConst.UNIQ_KEY),
            sys_flag,
            prepared,
            props,
        )

    def walk(self, view: memoryview, pos: int, stop: int, max_records: int) -> tuple[list[int], int, int]:
        """Positions of consecutive message records from `pos` (headers only, no CRC), at most
        `max_records`, stopping before `stop` (-1: none). Returns (positions, next position, reason):
        reason 1 = more may follow (end of the view, `stop`, or the count), 0 = the BLANK end of the file,
        -1 = something that is not a record at the next position.

        The chain is followed one record at a time (each size says where the next record starts), so
        this loop is the scan's and the replay's per-record Python: the first loop takes the records
        well inside the view and before `stop` with the fewest checks; the second decides, with every
        check, how the walk ends."""
        unpack = _BLANK.unpack_from
        end = len(view)
        out: list[int] = []
        append = out.append
        limit = end - 8
        fast_end = limit + 1 if stop < pos else min(stop, limit + 1)
        magic_code = MESSAGE_MAGIC_CODE
        for _ in repeat(None, max_records):
            if pos >= fast_end:
                break
            total, magic = unpack(view, pos)
            if magic != magic_code or total < 91 or pos + total > end:
                break
            append(pos)
            pos += total
        while len(out) < max_records:
            if pos == stop or pos >= end:
                return out, pos, 1
            if pos > limit:
                return out, pos, -1
            total, magic = unpack(view, pos)
            if magic != magic_code:
                return out, pos, 0 if magic == BLANK_MAGIC_CODE else -1
            if total < 91 or pos + total > end:
                return out, pos, -1
            append(pos)
            pos += total
        return out, pos, 1

    def parse_many(self, view: memoryview, positions: list[int], with_keys: bool = True) -> tuple[ParsedRecords, int]:
        """Dispatch facts of the records at `positions` (from `walk`), vectorised. Returns the facts of
        the leading records whose sizes are consistent and how many that is (the next one, if any, is
        not a valid record). `with_keys`: also the index keys (UNIQ_KEY, each KEYS value) as hashes."""
        u8 = np.frombuffer(view, dtype=np.uint8)
        last = len(u8) - 1
        pos = np.array(positions, dtype=np.int64)
        # each fixed part copied as one 88-byte row of a sliding-window view (walk: pos + 91 <= len)
        hdr = _windows(u8, FIXED_PART_LENGTH)[pos].view(RECORD_DTYPE).reshape(-1)
        total = hdr["total"].astype(np.int64)
        body_len = hdr["body_len"].astype(np.int64)
        tpos = pos + FIXED_PART_LENGTH + body_len
        tlen = u8[np.minimum(tpos, last)].astype(np.int64)
        ppos = tpos + 1 + tlen
        plen = (u8[np.minimum(ppos, last)].astype(np.int64) << 8) | u8[np.minimum(ppos + 1, last)]
        plen = np.where(plen >= 0x8000, plen - 0x10000, plen)  # signed short
        ok = (body_len >= 0) & (FIXED_PART_LENGTH + body_len + 3 <= total) & (plen >= 0)
        ok &= 91 + body_len + tlen + plen == total
        n = len(pos) if ok.all() else int(np.argmin(ok))
        if n < len(pos):
            hdr, total, tpos, tlen, ppos, plen = hdr[:n], total[:n], tpos[:n], tlen[:n], ppos[:n], plen[:n]
        topics, topic_ids = _topics_of(u8, tpos + 1, tlen, view)
        # properties: the four this dispatch needs, with J's parser semantics (pieces split on \x02,
        # key up to the first \x01, non-empty key and value, the last one wins), vectorised
        pstart = ppos + 2
        pend = pstart + plen
        found = _find_properties(u8, pstart, pend)
        store_ts = hdr["store_ts"].astype(np.int64)
        tags_code = np.zeros(n, dtype=np.int64)
        who, a, b = found[0]
        if len(who):
            h, exact = _HASHER.segment_hashes(u8, a, b)
            tags_code[who[exact]] = h[exact]
            for r, x, y in zip(who[~exact].tolist(), a[~exact].tolist(), b[~exact].tolist()):
                tags_code[r] = self.tags_code_of(view[x:y].tobytes().decode("utf-8", errors="replace"))
        schedule = topics.index(RMQ_SYS_SCHEDULE_TOPIC) if RMQ_SYS_SCHEDULE_TOPIC in topics else -1
        if schedule >= 0:
            ts_list = store_ts.tolist()
            delays = dict(zip(found[3][0].tolist(), zip(found[3][1].tolist(), found[3][2].tolist())))
            for i in np.flatnonzero(topic_ids == schedule).tolist():
                span = delays.get(i)
                level = _int_or_zero(view[span[0] : span[1]].tobytes().decode("utf-8", errors="replace") if span else None)
                if level > 0:
                    tags_code[i] = self.compute_deliver_timestamp(min(level, self.max_delay_level), ts_list[i])
        key_record, key_hash = _index_key_hashes(u8, view, topics, topic_ids, found[2], found[1]) if with_keys else (
            np.empty(0, dtype=np.int64),
            np.empty(0, dtype=np.int64),
        )
        return (
            ParsedRecords(
                phy=hdr["phy"].astype(np.int64),
                size=total,
                queue_id=hdr["queue_id"].astype(np.int64),
                queue_offset=hdr["queue_offset"].astype(np.int64),
                sys_flag=hdr["sys_flag"].astype(np.int64),
                store_ts=store_ts,
                tags_code=tags_code,
                topic_id=topic_ids,
                topics=topics,
                key_record=key_record,
                key_hash=key_hash,
                props=[view[a:b].tobytes() for a, b in zip(pstart.tolist(), pend.tolist())]
                if self.want_raw_props()
                else [],
            ),
            n,
        )

    def tags_code_of(self, tags: str | None) -> int:
        if not tags:
            return 0
        code = self.tags_cache.get(tags)
        if code is None:
            if len(self.tags_cache) > 4096:
                self.tags_cache.clear()
            code = self.tags_cache[tags] = tags_hash(tags)
        return code

    @staticmethod
    def verify_record(view: memoryview, pos: int, check_crc: bool) -> int:
        """Size of the valid record at `pos`, 0 for the BLANK filler, -1 for anything else (recovery scan)."""
        end = len(view)
        if pos + 8 > end:
            return -1
        total, magic = _BLANK.unpack_from(view, pos)
        if magic != MESSAGE_MAGIC_CODE:
            return 0 if magic == BLANK_MAGIC_CODE else -1
        if total < 91 or pos + total > end:
            return -1
        (crc,) = _INT.unpack_from(view, pos + 8)
        (body_len,) = _INT.unpack_from(view, pos + 84)
        if body_len < 0 or FIXED_PART_LENGTH + body_len + 3 > total:
            return -1
        p = pos + FIXED_PART_LENGTH + body_len
        topic_len = view[p]
        (props_len,) = _SHORT.unpack_from(view, p + 1 + topic_len) if p + 3 + topic_len <= end else (-1,)
        if props_len < 0 or 91 + body_len + topic_len + props_len != total:
            return -1
        if check_crc and (crc32(view[pos + FIXED_PART_LENGTH : pos + FIXED_PART_LENGTH + body_len]) & 0x7FFFFFFF) != crc:
            return -1
        return total

    # ---------------------------------------------------------------------------------------- recovery
    def _scan_files(self, index: int, check_crc: bool) -> RecoveryReport:
        """Verify records from the start of file `index` to the first invalid one."""
        files = self.mapped_file_queue.mapped_files
        mf = files[index]
        report = RecoveryReport(process_offset=mf.file_from_offset, start_file=mf.file_name)
        while True:
            view = mf.view
            found: list[np.ndarray] = []
            base = mf.file_from_offset
            pos, records = self._scan_view(view, 0, check_crc, found, base)
            size = self.verify_record(view, pos, check_crc)  # the record the tight loop stopped at
            while size > 0:  # (only when the loop stopped for a reason it leaves to verify_record)
                found.append(np.array([pos], dtype=np.int64))
                if self.on_verified is not None:
                    self.on_verified(base, view, [pos])
                pos += size
                records += 1
                more, n = self._scan_view(view, pos, check_crc, found, base)
                pos, records = more, records + n
                size = self.verify_record(view, pos, check_crc)
            if found:
                walked = np.concatenate(found)
                # the replay after recovery reuses them instead of walking the chain again
                self.recovered_positions[mf.file_from_offset] = walked[walked < pos]
            report.records += records
            report.scanned_bytes += pos
            if size == 0 and index + 1 < len(files):
                index += 1
                mf = files[index]
                continue
            break
        report.process_offset = mf.file_from_offset + pos
        report.dropped_bytes = self._dirty_bytes_after(mf, pos)
        return report

    def _scan_view(
        self, view: memoryview, pos: int, check_crc: bool, found: list[np.ndarray] | None = None, base: int = 0
    ) -> tuple[int, int]:
        """The recovery scan: (position of the first record it does not accept, records accepted). It
        accepts exactly what `verify_record` accepts; anything unusual (a BLANK, the end of the view, a
        bad record) stops it and `verify_record` decides. The chain of records is walked reading two
        ints per record; the size consistency of a chunk of records is checked with numpy and the
        body CRCs computed in one `map` over memoryview slices. `found` collects the positions walked
        (a superset of the accepted ones: the caller cuts at the returned position)."""
        records = 0
        u8 = np.frombuffer(view, dtype=np.uint8)
        while True:
            positions, after, _reason = self.walk(view, pos, -1, 4 * BULK_RECORDS)
            if not positions:
                return pos, records
            if found is not None:
                found.append(np.array(positions, dtype=np.int64))
            n, crc_at = _consistent(u8, positions)
            if check_crc and n:
                starts = (crc_at[0][:n]).tolist()
                ends = (crc_at[1][:n]).tolist()
                computed = np.fromiter(
                    map(crc32, map(view.__getitem__, map(slice, starts, ends))), dtype=np.int64, count=n
                )
                bad = np.flatnonzero((computed & 0x7FFFFFFF) != crc_at[2][:n])
                if bad.size:
                    n = int(bad[0])
            if n and self.on_verified is not None:
                self.on_verified(base, view, positions[:n])  # `base`: the file's CommitLog offset
            records += n
            if n < len(positions):
                return positions[n], records
            pos = after
            if len(positions) < 4 * BULK_RECORDS:
                return pos, records

    @staticmethod
    def _dirty_bytes_after(mf: MappedFile, pos: int) -> int:
        """How many bytes after the valid end were written (torn or unverifiable data being dropped).
        Stops at the first all-zero 64 KiB block: records are contiguous, so that is the end."""
        view = mf.view
        chunk = 64 * 1024
        last_dirty = pos
        p = pos
        while p < mf.file_size:
            stripped = bytes(view[p : min(p + chunk, mf.file_size)]).rstrip(b"\x00")
            if not stripped:
                break
            last_dirty = p + len(stripped)
            p += chunk
        return last_dirty - pos

    def _zero_tail(self, offset: int, length: int) -> None:
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or length <= 0:
            return
        pos = offset - mf.file_from_offset
        end = min(mf.file_size, pos + length)
        mf.view[pos:end] = bytes(end - pos)

    def recover_normally(self, clean_max_offset: int) -> RecoveryReport:
        """After a clean shutdown: trust the offset the shutdown wrote if it is consistent, else verify
        the last three files like upstream."""
        mfq = self.mapped_file_queue
        files = mfq.mapped_files
        if not files:
            mfq.flushed_where = mfq.committed_where = 0
            return RecoveryReport(process_offset=0)
        report: RecoveryReport | None = None
        if clean_max_offset >= files[0].file_from_offset and self._clean_offset_is_consistent(clean_max_offset):
            report = RecoveryReport(process_offset=clean_max_offset, start_file="checkpoint")
        if report is None:
            report = self._scan_files(max(0, len(files) - 3), self.config.check_crc_on_recover)
        self._truncate_to(report)
        return report

    def _clean_offset_is_consistent(self, offset: int) -> bool:
        mfq = self.mapped_file_queue
        last = mfq.last_mapped_file()
        assert last is not None
        if offset > last.tail_offset:
            return False
        mf = mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return offset == last.tail_offset
        # files after it must be empty, and nothing may follow the end inside it
        if any(f.file_from_offset > mf.file_from_offset and bytes(f.view[:8]) != bytes(8) for f in mfq.mapped_files):
            return False
        pos = offset - mf.file_from_offset
        return pos + 8 > mf.file_size or bytes(mf.view[pos : pos + 8]) == bytes(8)

    def recover_abnormally(self, min_timestamp: int) -> RecoveryReport:
        """After a crash: start at the newest file whose first record was stored at or before
        `min_timestamp` (checkpoint - 3 s), verify magic and CRC forward, truncate the torn tail."""
        mfq = self.mapped_file_queue
        files = mfq.mapped_files
        if not files:
            mfq.flushed_where = mfq.committed_where = 0
            return RecoveryReport(process_offset=0)
        index = len(files) - 1
        while index >= 0:
            head = files[index].view
            magic = _INT.unpack_from(head, 4)[0]
            store_ts = _LONG.unpack_from(head, POS_STORE_TIMESTAMP)[0]
            if magic == MESSAGE_MAGIC_CODE and store_ts != 0 and store_ts <= min_timestamp:
                break
            index -= 1
        report = self._scan_files(max(index, 0), self.config.check_crc_on_recover)
        self._truncate_to(report)
        return report

    def _truncate_to(self, report: RecoveryReport) -> None:
        mfq = self.mapped_file_queue
        offset = report.process_offset
        if report.dropped_bytes > 0:
            # zero the torn bytes: a later recovery must never mistake them for records
            self._zero_tail(offset, report.dropped_bytes)
        mfq.flushed_where = offset
        mfq.committed_where = offset
        mfq.truncate_dirty_files(offset)

    # ------------------------------------------------------------------------------------- lifecycle
    def load(self) -> None:
        self.mapped_file_queue.load()

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()


_SPACE = ord(" ")
_HASHER = JavaHasher()  # (keeps its power tables between parses)


def _consistent(u8: np.ndarray, positions: list[int]) -> tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """How many leading records at `positions` have consistent sizes (verify_record's checks after the
    magic and the total size), and their (body start, body end, stored CRC) arrays."""
    last = len(u8) - 1
    pos = np.array(positions, dtype=np.int64)
    hdr = _windows(u8, FIXED_PART_LENGTH)[pos].view(RECORD_DTYPE).reshape(-1)
    total = hdr["total"].astype(np.int64)
    crc = hdr["crc"].astype(np.int64)
    body_len = hdr["body_len"].astype(np.int64)
    tpos = pos + FIXED_PART_LENGTH + np.maximum(body_len, 0)
    tlen = u8[np.minimum(tpos, last)].astype(np.int64)
    ppos = tpos + 1 + tlen
    plen = (u8[np.minimum(ppos, last)].astype(np.int64) << 8) | u8[np.minimum(ppos + 1, last)]
    plen = np.where(plen >= 0x8000, plen - 0x10000, plen)
    ok = (body_len >= 0) & (FIXED_PART_LENGTH + body_len + 3 <= total) & (tpos + 3 + tlen <= pos + total)
    ok &= (plen >= 0) & (91 + body_len + tlen + plen == total)
    n = len(pos) if ok.all() else int(np.argmin(ok))
    return n, (pos + FIXED_PART_LENGTH, tpos, crc)


def _windows(u8: np.ndarray, width: int) -> np.ndarray:
    """Read-only (len - width + 1, width) view of every `width` bytes of `u8` (no copy): indexing it
    with positions copies one row per position, far cheaper than an index matrix."""
    n = len(u8) - width + 1
    if n <= 0:
        return np.empty((0, width), dtype=np.uint8)
    return np.lib.stride_tricks.as_strided(u8, shape=(n, width), strides=(1, 1), writeable=False)


def _find_properties(
    u8: np.ndarray, pstart: np.ndarray, pend: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For TAGS, KEYS, UNIQ_KEY and DELAY: (record, value start, value end) arrays of the records whose
    properties, spanning [pstart, pend) of `u8`, have it, exactly as J's string2messageProperties reads
    them (pieces split on \x02, the name up to the first \x01, non-empty value, the last one wins)."""
    n = len(pstart)
    empty = np.empty(0, dtype=np.int64)
    if n == 0 or not (pend > pstart).any():
        return [(empty, empty, empty) for _ in _PROPERTY_NAMES]
    plen = pend - pstart
    width = int(plen.max())
    if n * width <= (int(pend[-1]) - int(pstart[0])) // 2:
        # the properties as rows of a sliding-window view: only their bytes are searched
        row_start = np.minimum(pstart, len(u8) - width)  # rows near the end of the view start earlier
        rec, col = np.nonzero(_windows(u8, width)[row_start] == 2)
        # (a row runs past shorter properties into the next record: keep the \x02 bytes inside them)
        seps = row_start[rec] + col
        inside = (seps >= pstart[rec]) & (seps < pend[rec])
        seps, rec = seps[inside], rec[inside]
    else:
        lo, hi = int(pstart[0]), int(pend[-1])
        seps = np.flatnonzero(u8[lo:hi] == 2) + lo
        rec = np.searchsorted(pstart, seps, side="right") - 1
        inside = seps < pend[rec]  # \x02 bytes of bodies and headers are not separators
        seps, rec = seps[inside], rec[inside]
    # pieces in order: each record's first piece, then one after each of its separators
    per_record = np.bincount(rec, minlength=n)
    first_slot = np.arange(n, dtype=np.int64) + np.cumsum(per_record) - per_record
    starts = np.empty(n + len(seps), dtype=np.int64)
    owner = np.empty(n + len(seps), dtype=np.int64)
    starts[first_slot] = pstart
    owner[first_slot] = np.arange(n, dtype=np.int64)
    sep_slot = first_slot[rec] + 1 + (np.arange(len(seps), dtype=np.int64) - (np.cumsum(per_record) - per_record)[rec])
    starts[sep_slot] = seps + 1
    owner[sep_slot] = rec
    ends = np.empty_like(starts)
    ends[:-1] = np.where(owner[1:] == owner[:-1], starts[1:] - 1, pend[owner[:-1]])
    ends[-1] = pend[owner[-1]]
    long_enough = ends - starts > 2
    first = u8[np.minimum(starts, len(u8) - 1)]
    out = []
    for name in _PROPERTY_NAMES:
        k = len(name)
        cand = np.flatnonzero(long_enough & (first == name[0]) & (ends - starts > k + 1))
        at = starts[cand]
        hit = u8[at + k] == 1
        for j in range(1, k):
            hit &= u8[at + j] == name[j]
        cand = cand[hit]
        who = owner[cand]
        last = np.ones(len(cand), dtype=bool)
        last[:-1] = who[1:] != who[:-1]  # a name twice in one record: the later piece wins
        cand, who = cand[last], who[last]
        out.append((who, starts[cand] + k + 1, ends[cand]))
    return out


def _topics_of(u8: np.ndarray, starts: np.ndarray, lens: np.ndarray, view: memoryview) -> tuple[list[str], np.ndarray]:
    """(distinct topics, topic index of each record): records come in runs of one topic, so only the
    first record of each run is decoded."""
    n = len(starts)
    ids = np.zeros(n, dtype=np.int64)
    if n == 0:
        return [], ids
    change = np.ones(n, dtype=bool)
    change[1:] = lens[1:] != lens[:-1]
    width = int(lens.max())
    if width and n > 1:
        # compare each topic with the one before it (bytes past a topic's end do not count); a topic
        # too close to the end of the view for a full row starts a run of its own
        windows = _windows(u8, width)
        fits = starts <= len(u8) - width
        rows = windows[np.where(fits, starts, 0)]
        differs = ((rows[1:] != rows[:-1]) & (np.arange(width) < lens[1:, None])).any(axis=1)
        change[1:] |= differs | ~fits[1:] | ~fits[:-1]
    runs = np.flatnonzero(change)
    index: dict[bytes, int] = {}
    topics: list[str] = []
    run_ids = []
    for a, k in zip(starts[runs].tolist(), lens[runs].tolist()):
        raw = view[a : a + k].tobytes()
        t = index.get(raw)
        if t is None:
            t = index[raw] = len(topics)
            topics.append(raw.decode("utf-8", errors="replace"))
        run_ids.append(t)
    ids[:] = np.repeat(np.array(run_ids, dtype=np.int64), np.diff(np.append(runs, n)))
    return topics, ids


def _index_key_hashes(
    u8: np.ndarray,
    view: memoryview,
    topics: list[str],
    topic_ids: np.ndarray,
    uniq: tuple[np.ndarray, np.ndarray, np.ndarray],
    keys: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """(record, abs hash) of every index key — the UNIQ_KEY, then each space-separated KEYS value, per
    record in CommitLog order — hashed as topic + "#" + key without building the strings. Values that
    are not plain ASCII, and KEYS holding several keys, take the scalar path."""
    prefix = np.array([java_string_hash(t + "#") for t in topics], dtype=np.int64)
    recs, subs, hashes = [], [], []
    for sub, (who, a, b) in enumerate((uniq, keys)):
        if not len(who):
            continue
        # several keys in one KEYS value (a space between them) take the scalar path too
        h, exact = _HASHER.segment_hashes(u8, a, b, _SPACE if sub == 1 else -1)
        full = combine(prefix[topic_ids[who]], h, b - a)
        recs.append(who[exact])
        subs.append(np.full(int(exact.sum()), sub, dtype=np.int64))
        hashes.append(abs_hashes(full[exact]))
        slow_r, slow_h, slow_s = [], [], []
        for r, x, y in zip(who[~exact].tolist(), a[~exact].tolist(), b[~exact].tolist()):
            text = view[x:y].tobytes().decode("utf-8", errors="replace")
            parts = [text] if sub == 0 else [k for k in text.split(MessageConst.KEY_SEPARATOR) if k]
            topic = topics[int(topic_ids[r])]
            for j, key in enumerate(parts):
                h32 = java_string_hash(f"{topic}#{key}")
                slow_r.append(r)
                slow_s.append(sub + j)
                slow_h.append(0 if h32 == -0x80000000 else abs(h32))
        if slow_r:
            recs.append(np.array(slow_r, dtype=np.int64))
            subs.append(np.array(slow_s, dtype=np.int64))
            hashes.append(np.array(slow_h, dtype=np.int64))
    if not recs:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    rec = np.concatenate(recs)
    sub = np.concatenate(subs)
    order = np.lexsort((sub, rec))
    return rec[order], np.concatenate(hashes)[order]


def _int_or_zero(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0
