"""CommitLog: the single append-only log every message goes to, and its single writer.

Producers (`MessageStore.put_message[s]`) encode their records outside the lock and hand them to the
writer. The writer task drains everything handed over in one go under the append "lock" section:
for each request it records `begin_time_in_lock`, assigns queue offsets from the topic-queue table,
physical offsets and the store timestamp, and copies the bytes into the mapped file (or the transient
pool buffer). A record that does not fit with 8 spare bytes ends the file with a BLANK filler and goes
to the next file, created ahead of time in a worker thread. The section awaits only for a file that is
not ready yet or for an injected stall, so the event loop keeps running and the busy signals can be
observed. After each request the writer hands its dispatch to the bound CommitLogDispatcher (inline
while the reput is caught up, else described in `dispatch_queue` for the reput); a group of single sends
(`append_group_now`) is written in one pass and dispatched with one call. Parsing records back
is `self.parser` (store/record_parser.py); finding the valid end after a crash is `self.recovery`
(store/recovery.py).
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from store.config import OS_PAGE_SIZE, MessageStoreConfig
from store.fault import StoreFault
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue, RunBlocking
from store.message import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    FIXED_PART,
    FIXED_PART_LENGTH,
    IPV4_HOSTS_MASK,
    MESSAGE_MAGIC_CODE,
    POS_STORE_TIMESTAMP,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageConst,
    MessageExtBrokerInner,
    RecordEncoder,
    join_offset_msg_ids,
    offset_msg_id_prefix,
)
from store.record_parser import DispatchRequest, RecordParser
from store.recovery import CommitLogRecovery
from store.results import AppendMessageResult, PutMessageResult, PutMessageStatus, StoredPut

if TYPE_CHECKING:
    from store.dispatcher import CommitLogDispatcher
    from store.prefault import PrefaultService

log = structlog.get_logger(__name__)

_LONG = struct.Struct(">q")
_FIXED_FORMAT = FIXED_PART.format  # (">" and the fixed part's fields; a record's Struct adds body and tail)
_RECORD_STRUCTS_MAX = 64
_BLANK = struct.Struct(">ii")
MAX_DRAIN = 4096  # requests per lock section; bounds the time the section can take


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

    @classmethod
    def of_one(
        cls, msg: MessageExtBrokerInner, tail: bytes, crc: int, size: int, stall_ms: int, future: asyncio.Future | None
    ) -> AppendRequest:
        """The request of a single planned message."""
        return cls(
            [msg],
            [tail],
            [crc],
            [size],
            size,
            msg.topic,
            msg.queue_id,
            msg.sys_flag,
            msg.prepared_transaction_offset,
            msg.store_host,
            stall_ms,
            future,
        )


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


@dataclass(slots=True)
class AppendFailure:
    status: PutMessageStatus
    remark: str


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
        # the consume queues, index and listeners behind the log (bound by the store; None: appends only)
        self.dispatcher: CommitLogDispatcher | None = None
        self._stage = memoryview(bytearray(1024 * 1024))
        # woken when an append ends at or past its wake_offset (store.prefault); None when off
        self.prefault: PrefaultService | None = None
        self.encoder = RecordEncoder()
        self.parser = RecordParser(config)  # records back to dispatch facts (reput, recovery, rebuilds)
        self.recovery = CommitLogRecovery(self.mapped_file_queue, self.parser, config.check_crc_on_recover)
        self._pending: deque[AppendRequest] = deque()
        self._wake = asyncio.Event()
        self._writer_task: asyncio.Task | None = None
        self._in_section = False  # the writer is between taking requests and answering them
        self._closed = False
        self._id_prefix: dict[tuple[str, int], str] = {}
        self._record_structs: dict[tuple[int, int], struct.Struct] = {}  # see _record_struct
        # statistics read by runtime_info
        self.put_message_times_total = 0
        self.put_message_size_total = 0
        self.lock_time_max_ms = 0

    def bind_dispatcher(self, dispatcher: CommitLogDispatcher) -> None:
        """The writer dispatches what it appends through `dispatcher` while the reput is caught up, and
        has it dispatch what became readable after each section."""
        self.dispatcher = dispatcher

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

    def append_now(self, req: AppendRequest, now: int | None = None) -> AppendMessageResult | AppendFailure | None:
        """The whole append section on the caller's stack (no future, no hop to the writer task) when
        the writer is idle: nothing queued, no section open, no stall, the file has room. None → queue
        the request (`submit`). Order is kept: anything queued before goes first. `now`: the caller's
        clock reading (ms) taken just before, in the same synchronous stretch, used as the store
        timestamp and the section's begin (nothing else can append in between)."""
        if self._pending or self._in_section or self._closed or self._writer_task is None:
            return None
        try:
            # None after writing a BLANK: the next file may need an await
            return self._append_fast(req, self.now_ms() if now is None else now)
        finally:
            self.begin_time_in_lock = 0

    def append_group_now(
        self,
        msgs: list[MessageExtBrokerInner],
        tails: list[bytes],
        crcs: list[int],
        sizes: list[int],
        now: int,
    ) -> list[PutMessageResult]:
        """`append_now` for several single messages in one pass (the single sends of one read, any topics and
        queues), planned by `RecordEncoder.plan` (`tails`, `crcs`, `sizes` in the order of `msgs`): the idle
        check, the file lookup, the section's accounting and the inline dispatch once for the group, each
        message its own record, queue offset and result, in order. No AppendRequest is built for them.
        Returns the put results of the leading messages it appended (PUT_OK with the append's result and the
        message's `store_timestamp` set, or UNKNOWN_ERROR for a record whose write failed; the put's last
        steps, flush and statistics, are the caller's): fewer than `msgs` when the file ran out (a BLANK was
        written: the next file may need an await) or the writer is not idle; the caller queues the rest, in
        order, with `submit`. `put_message_times_total` grows by the records written."""
        if (
            self._pending
            or self._in_section
            or self._closed
            or self._writer_task is None
            or self.fault.stall_append_until_ms
        ):
            return []
        mf = self.mapped_file_queue.last_mapped_file()
        if mf is None or mf.is_full():
            return []
        self.begin_time_in_lock = now
        try:
            results = self._write_group(mf, msgs, tails, crcs, sizes, now)
        finally:
            self.begin_time_in_lock = 0
        self._account(now)
        return results

    def _write_group(
        self,
        mf: MappedFile,
        msgs: list[MessageExtBrokerInner],
        tails: list[bytes],
        crcs: list[int],
        sizes: list[int],
        store_ts: int,
    ) -> list[PutMessageResult]:
        """`_do_append` of one record each, unrolled for a group (the SEND path's hot loop): the records are
        written back to back into `mf`, then dispatched with one `CommitLogDispatcher.dispatch_group`; what
        that leaves (a consume queue needing its next file, a pool buffer) is described for the reput. Each
        result is the put's own (`append_group_now`), so that the caller does not walk the group again to
        wrap them."""
        results: list[PutMessageResult] = []
        pos = start = mf.wrote_position
        file_size = mf.file_size
        base = mf.file_from_offset
        view = mf.write_view
        pooled = mf.write_buffer is not None
        prefaulted = mf.prefaulted_position
        table = self.topic_queue_table
        encoder = self.encoder
        write = encoder.write
        pack = FIXED_PART.pack_into
        records = self._record_structs
        hosts = encoder.host_bytes
        id_prefix = self._id_prefix
        failed: list[int] = []  # (rare) where a record's write failed: left out of the dispatch
        queue_offsets: list[int] = []
        ended = False  # a BLANK ends the file
        # the hosts of the previous message (a group's sends share their connection's and the broker's tuples)
        last_born = last_store = None
        born_ip = store_ip = b""
        born_port = store_port = 0
        id_base = 0
        for msg, tail, crc, size in zip(msgs, tails, crcs, sizes):
            room = file_size - pos
            if size + END_FILE_MIN_BLANK_LENGTH > room:  # END_OF_FILE: this one and the rest go to the writer
                _BLANK.pack_into(view, pos, room, BLANK_MAGIC_CODE)
                if pooled and room > 8:
                    view[pos + 8 : file_size] = bytes(room - 8)  # pool buffers are reused: no stale bytes
                ended = True
                break
            key = (msg.topic, msg.queue_id)
            # prepared (0x4) and rolled-back (0xC) transaction records take no queue offset (they get 0): the
            # transaction types with bit 0x4 set
            counts = not msg.sys_flag & TRANSACTION_PREPARED_TYPE
            queue_offset = table.get(key, 0) if counts else 0
            phy = base + pos
            born = msg.born_host
            if born is not last_born:
                last_born = born
                born_ip = hosts.get(born[0]) or encoder.host(born[0])
                born_port = born[1]
            store = msg.store_host
            if store is not last_store:
                last_store = store
                store_ip = hosts.get(store[0]) or encoder.host(store[0])
                store_port = store[1]
                prefix = id_prefix.get(store)
                if prefix is None:
                    prefix = id_prefix[store] = offset_msg_id_prefix(*store)
                # the offset id as one 128-bit int (host, port, offset) in hex: cheaper than formatting the offset
                # with "016X" after the prefix (0.22 against 0.33 us, timeit)
                id_base = int(prefix, 16) << 64
            body = msg.body
            if not pooled and size >= OS_PAGE_SIZE and pos + size > prefaulted:
                # an unpopulated stretch of the mapping: one pwrite from the staging buffer (see _do_append)
                stage = self._staging(size)
                write(stage, 0, msg, tail, crc, size, queue_offset, phy, store_ts)
                try:
                    mf.write_at(stage[:size], pos)
                except OSError as exc:
                    log.error("write to the CommitLog failed", error=str(exc), file=mf.file_name, position=pos)
                    failed.append(len(results))
                    results.append(
                        PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, None, f"write to the CommitLog failed: {exc}")
                    )
                    continue  # nothing published for this one; the next takes its place
            elif body.__class__ is bytes:  # (RecordEncoder.write unrolled: the whole record in one pack_into)
                blen = len(body)
                rec = records.get((blen, len(tail)))
                if rec is None:
                    rec = self._record_struct(blen, len(tail))
                rec.pack_into(
                    view,
                    pos,
                    size,
                    MESSAGE_MAGIC_CODE,
                    crc,
                    msg.queue_id,
                    msg.flag,
                    queue_offset,
                    phy,
                    msg.sys_flag & IPV4_HOSTS_MASK,
                    msg.born_timestamp,
                    born_ip,
                    born_port,
                    store_ts,
                    store_ip,
                    store_port,
                    msg.reconsume_times,
                    msg.prepared_transaction_offset,
                    blen,
                    body,
                    tail,
                )
            else:  # a body that is not bytes (or None): the fixed part, the body, the tail
                body = body or b""
                blen = len(body)
                pack(
                    view,
                    pos,
                    size,
                    MESSAGE_MAGIC_CODE,
                    crc,
                    msg.queue_id,
                    msg.flag,
                    queue_offset,
                    phy,
                    msg.sys_flag & IPV4_HOSTS_MASK,
                    msg.born_timestamp,
                    born_ip,
                    born_port,
                    store_ts,
                    store_ip,
                    store_port,
                    msg.reconsume_times,
                    msg.prepared_transaction_offset,
                    blen,
                )
                b = pos + FIXED_PART_LENGTH
                e = b + blen
                view[b:e] = body
                view[e : pos + size] = tail
            if counts:
                table[key] = queue_offset + 1
            pos += size
            msg.store_timestamp = store_ts
            results.append(
                StoredPut(phy, size, (id_base | phy).to_bytes(16, "big").hex().upper(), store_ts, queue_offset)
            )
            queue_offsets.append(queue_offset)
        mf.wrote_position = file_size if ended else pos
        # what was written, for the dispatch: the leading messages, but for the (rare) failed writes
        n = len(results)
        if failed:
            written = [m for k, m in enumerate(msgs[:n]) if k not in failed]
            written_sizes = [z for k, z in enumerate(sizes[:n]) if k not in failed]
        else:
            written = msgs if n == len(msgs) else msgs[:n]
            written_sizes = sizes if n == len(sizes) else sizes[:n]
        if not written:
            return results
        mf.store_timestamp = store_ts
        end = base + pos
        pf = self.prefault
        if pf is not None and end >= pf.wake_offset:
            pf.wakeup()
        self.put_message_times_total += len(written)
        self.put_message_size_total += pos - start
        # consume queue entries, index keys and arrival notices: inline when the reput is caught up and the
        # bytes are readable (no pool buffer), else described for the reput
        phy = base + start
        done = 0
        if self.dispatcher is not None and not pooled:
            done = self.dispatcher.dispatch_group(written, written_sizes, queue_offsets, phy, store_ts)
        if done < len(written):
            self._describe_group(written, written_sizes, queue_offsets, phy, done, store_ts)
        return results

    def _record_struct(self, body_length: int, tail_length: int) -> struct.Struct:
        """The `Struct` of a whole record with a body and a tail (topic, properties) of these lengths: the fixed
        part, then both as bytes. A sender's records are mostly of one or a few such shapes (the benchmark
        Producer's: one), so `_write_group` writes each in one `pack_into`; bounded, cleared when full."""
        records = self._record_structs
        if len(records) >= _RECORD_STRUCTS_MAX:
            records.clear()
        rec = records[(body_length, tail_length)] = struct.Struct(f"{_FIXED_FORMAT}{body_length}s{tail_length}s")
        return rec

    def _describe_group(
        self,
        msgs: list[MessageExtBrokerInner],
        sizes: list[int],
        queue_offsets: list[int],
        phy: int,
        start: int,
        store_ts: int,
    ) -> None:
        """DispatchRequests for records start.. of a group written from `phy` (so that the reput need not
        parse them), queued for the reput."""
        phy += sum(sizes[:start])
        tags_code = self.parser.dispatch_tags_code
        for i in range(start, len(msgs)):
            msg = msgs[i]
            props = msg.properties
            size = sizes[i]
            self.dispatch_queue.append(
                DispatchRequest(
                    msg.topic,
                    msg.queue_id,
                    phy,
                    size,
                    tags_code(msg.topic, props, store_ts),
                    store_ts,
                    queue_offsets[i],
                    props.get(MessageConst.KEYS),
                    props.get(MessageConst.UNIQ_KEY),
                    msg.sys_flag,
                    msg.prepared_transaction_offset,
                    props,
                )
            )
            phy += size

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
                    result = self._append_fast(req, self.now_ms())
                    if result is None:
                        try:
                            result = await self._append_slow(req)
                        except Exception as exc:  # never lose the writer to one bad request
                            log.exception("append failed", topic=req.topic)
                            result = AppendFailure(PutMessageStatus.UNKNOWN_ERROR, f"append failed: {exc}")
                    done.append((req, result))
            finally:
                self.begin_time_in_lock = 0
            if self.dispatcher is not None:
                try:
                    await self.dispatcher.after_append_section()
                except Exception:
                    log.exception("dispatch after append failed")
            self._in_section = False
            for req, result in done:
                if req.future is not None and not req.future.done():
                    req.future.set_result(result)

    def _append_fast(self, req: AppendRequest, now: int) -> AppendMessageResult | AppendFailure | None:
        """The whole append when no await is needed; None → take the slow path."""
        if req.stall_ms > 0 or self.fault.stall_append_until_ms:
            return None
        mf = self.mapped_file_queue.last_mapped_file()
        if mf is None or mf.is_full():
            return None
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
        # prepared and rolled-back transaction records take no queue offset (they get 0)
        tran = req.sys_flag & TRANSACTION_ROLLBACK_TYPE
        counts = tran != TRANSACTION_PREPARED_TYPE and tran != TRANSACTION_ROLLBACK_TYPE
        queue_offset = table.get(key, 0) if counts else 0
        wrote_offset = mf.file_from_offset + pos
        msgs = req.msgs
        n = len(msgs)
        # Where the mapping is not populated yet, a copy into it faults on every page, and the fault
        # zero-fills the hole (with readahead, many pages at a time) on this thread: ~8 us per 4 KiB.
        # pwrite of the same bytes skips the zeroing of whole pages: the records are encoded into a
        # reused staging buffer and written with one syscall (the mapping sees them: one page cache).
        staged = mf.write_buffer is None and total >= OS_PAGE_SIZE and pos + total > mf.prefaulted_position
        target, at = (self._staging(total), 0) if staged else (view, pos)
        if n == 1:  # (the SEND path: one record, without write_many's lists)
            self.encoder.write(
                target, at, msgs[0], req.tails[0], req.crcs[0], total, queue_offset, wrote_offset, store_ts
            )
        else:
            req.phys = self.encoder.write_many(
                target,
                at,
                msgs,
                req.tails,
                req.crcs,
                req.sizes,
                queue_offset,
                1 if counts else 0,
                wrote_offset,
                store_ts,
            )  # the batch dispatch (one pass) and the message ids read them
        if staged:
            try:
                mf.write_at(target[:total], pos)
            except OSError as exc:
                # nothing is published: the write position, queue offsets and dispatch stay as they were
                log.error("write to the CommitLog failed", error=str(exc), file=mf.file_name, position=pos)
                req.phys = None
                return AppendFailure(PutMessageStatus.UNKNOWN_ERROR, f"write to the CommitLog failed: {exc}")
        mf.wrote_position = pos + total
        mf.store_timestamp = store_ts
        pf = self.prefault
        if pf is not None and wrote_offset + total >= pf.wake_offset:
            pf.wakeup()
        if counts:
            table[key] = queue_offset + n
        self.put_message_times_total += n
        self.put_message_size_total += total
        # the consume queue entries, index keys and arrival notices: inline when the reput is caught up
        # and the bytes are readable (no pool buffer), else described for the reput
        done = 0
        if self.dispatcher is not None and mf.write_buffer is None:
            done = self.dispatcher.dispatch_appended(req, wrote_offset, queue_offset, store_ts)
        if done < n:
            if done == 0 and n > 1 and counts:
                # one descriptor for the whole batch: the reput dispatches it in one pass once committed
                self.dispatch_queue.append(DispatchBatch(req, wrote_offset, total, queue_offset, store_ts))
            else:
                described = self.parser.describe(req, done, wrote_offset, queue_offset, store_ts, counts)
                self.dispatch_queue.extend(described)
        prefix = self._id_prefix.get(req.store_host)
        if prefix is None:
            prefix = self._id_prefix[req.store_host] = offset_msg_id_prefix(*req.store_host)
        return AppendMessageResult(
            wrote_offset,
            total,
            f"{prefix}{wrote_offset:016X}" if n == 1 else join_offset_msg_ids(prefix, req.phys),
            store_ts,
            queue_offset,
            n,
        )

    # ------------------------------------------------------------------------------------- lifecycle
    def load(self) -> None:
        self.mapped_file_queue.load()

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()
