"""MessagePutter: the put path from a message to an appended record (upstream asyncPutMessage[s]).

Checks (store status, topic name and length, body size, batch rules), the DELAY rewrite into
SCHEDULE_TOPIC_XXXX, the record planned outside the lock (`RecordEncoder.plan[_many]`), then the append:
on the caller's stack when the writer is idle (`CommitLog.append_now`, dispatched inline), else queued
to the writer task. After the append the store's `after_put` wakes the flush or hands back what to wait
for (SYNC_FLUSH).

The SEND path calls `put_message` once per message, so its fixed cost is the store's share of every
send: the topic checks run once per topic (a bounded set of topics that passed), the clock is read
twice (begin, which is also the store timestamp of an inline append, and end), and nothing awaits
unless something must be waited for (a SYNC_FLUSH fsync, a reput round, the writer).
`put_message_group` (group commit) puts messages of any topics and queues, each a put of its own, in
one pass, for a caller that holds several sends at once: the fixed cost is paid once per group.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

from store.commit_log import AppendFailure, AppendRequest, CommitLog
from store.config import FlushDiskType, MessageStoreConfig
from store.dispatcher import CommitLogDispatcher
from store.message import (
    FIXED_PART_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    RMQ_SYS_SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageConst,
    MessageExtBrokerInner,
    RecordError,
    encode_properties,
    transaction_value,
)
from store.path_guard import unsafe_dir_name_reason
from store.reput import ReputMessageService
from store.results import AppendMessageResult, PutMessageResult, PutMessageStatus
from store.send_rows import SendRowPut
from store.stats import StoreStats

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - optional speed-up (store.message picks the same)
    from zlib import crc32

_SHORT = struct.Struct(">h")
_YIELD_EVERY_INLINE = 64  # appends done on the caller's stack in a row before a put yields to the loop
_TOPICS_OK_MAX = 4096  # topics remembered as checked (the set starts over when full)
_PUT_OK = PutMessageStatus.PUT_OK
_DELAY = MessageConst.DELAY

# after_put(result, msg, topic): None when the put is done (the flush was woken, or nothing to do), else
# an awaitable of the put's status (SYNC_FLUSH: the fsync covering it, or FLUSH_DISK_TIMEOUT)
AfterPut = Callable[[AppendMessageResult, MessageExtBrokerInner | None, str], Awaitable[PutMessageStatus] | None]


class MessagePutter:
    def __init__(
        self,
        config: MessageStoreConfig,
        commit_log: CommitLog,
        dispatcher: CommitLogDispatcher,
        reput: ReputMessageService,
        stats: StoreStats,
        now_ms: Callable[[], int],
        *,
        pooled: bool,
        store_status: Callable[[], tuple[PutMessageStatus, str | None]],
        after_put: AfterPut,
    ) -> None:
        """`pooled`: the CommitLog writes into transient pool buffers (records become readable, and are
        dispatched, once committed); `store_status()` answers whether the store takes puts now;
        `after_put(result, msg, topic)` wakes the flush, or returns what the put must wait for."""
        self.config = config
        self.commit_log = commit_log
        self.dispatcher = dispatcher
        self.reput = reput
        self.stats = stats
        self.now_ms = now_ms
        self._pooled = pooled
        self._store_status = store_status
        self._after_put = after_put
        self._encoder = commit_log.encoder
        self._inline_appends = 0
        self._topics_ok: set[str] = set()
        self.send_rows = SendRowPut(self)  # the SEND path's group put in one pass (store/send_rows.py)

    def _rewrite_delay(self, msg: MessageExtBrokerInner) -> None:
        """Upstream CommitLog.asyncPutMessage: a DELAY level on a non-transactional message stores it in
        SCHEDULE_TOPIC_XXXX queue level-1 with REAL_TOPIC/REAL_QID (clamped to the max level)."""
        tran = transaction_value(msg.sys_flag)
        if tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE) or msg.topic == RMQ_SYS_SCHEDULE_TOPIC:
            return
        level = msg.delay_time_level
        if level <= 0:
            return
        level = min(level, self.commit_log.parser.max_delay_level)
        props = dict(msg.properties)
        props[MessageConst.DELAY] = str(level)
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QID] = str(msg.queue_id)
        msg.properties = props
        msg.properties_string = encode_properties(props)
        msg.topic = RMQ_SYS_SCHEDULE_TOPIC
        msg.queue_id = level - 1

    def _topic_rejection(self, topic: str) -> PutMessageResult | None:
        """Why a put to `topic` is refused (too long, not a folder name), or None. Topics that passed are
        remembered: the checks run once per topic, not once per put."""
        if topic in self._topics_ok:
            return None
        if len(topic) > MAX_TOPIC_LENGTH:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, f"topic length {len(topic)} > 127")
        if (unsafe := unsafe_dir_name_reason(topic)) is not None:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, f"the topic cannot be a folder: {unsafe}")
        if len(self._topics_ok) >= _TOPICS_OK_MAX:
            self._topics_ok.clear()
        self._topics_ok.add(topic)
        return None

    def _plan(self, msg: MessageExtBrokerInner) -> tuple[bytes, int, int] | PutMessageResult:
        """(tail, crc, size) of the record for `msg` (RecordEncoder.plan), or the rejection."""
        if (rejected := self._topic_rejection(msg.topic)) is not None:
            return rejected
        body = msg.body
        if body is not None and len(body) > self.config.max_message_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                None,
                f"message body size {len(body)} exceeds maxMessageSize {self.config.max_message_size}",
            )
        try:
            return self._encoder.plan(msg)
        except RecordError as exc:
            return self._rejection(exc)

    def _plan_batch(
        self, msgs: list[MessageExtBrokerInner]
    ) -> tuple[list[bytes], list[int], list[int], int] | PutMessageResult:
        """(tails, crcs, sizes, total) of a batch of one topic (RecordEncoder.plan_many), or the rejection."""
        if (rejected := self._topic_rejection(msgs[0].topic)) is not None:
            return rejected
        try:
            return self._encoder.plan_many(msgs, self.config.max_message_size)
        except RecordError as exc:
            return self._rejection(exc)

    @staticmethod
    def _rejection(exc: RecordError) -> PutMessageResult:
        text = str(exc)
        status = (
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
            if text.startswith("PROPERTIES_SIZE_EXCEEDED")
            else PutMessageStatus.MESSAGE_ILLEGAL
        )
        return PutMessageResult(status, None, text)

    def _request(self, msg: MessageExtBrokerInner, stall_ms: int) -> AppendRequest | PutMessageResult:
        """The append request of one message (DELAY rewritten, planned), or why it is refused."""
        if _DELAY in msg.properties:
            self._rewrite_delay(msg)
        plan = self._plan(msg)
        if plan.__class__ is PutMessageResult:
            self.stats.put_failed += 1
            return plan
        tail, crc, size = plan
        if size + 8 > self.config.mapped_file_size_commit_log:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                None,
                f"{size} bytes do not fit in a CommitLog file of {self.config.mapped_file_size_commit_log}",
            )
        return AppendRequest.of_one(msg, tail, crc, size, stall_ms, None)

    async def put_message(self, msg: MessageExtBrokerInner, *, stall_append_ms: int = 0) -> PutMessageResult:
        """Append one message; with SYNC_FLUSH wait until an fsync covers it."""
        status, remark = self._store_status()
        if status is not _PUT_OK:
            return PutMessageResult(status, None, remark)
        begin = self.now_ms()
        req = self._request(msg, stall_append_ms)
        if req.__class__ is PutMessageResult:
            return req
        return await self._submit(req, msg, begin)

    async def put_messages(self, msgs: list[MessageExtBrokerInner], *, stall_append_ms: int = 0) -> PutMessageResult:
        """Append a batch of messages of one topic and queue: one contiguous write, consecutive queue
        offsets, one file (upstream asyncPutMessages)."""
        status, remark = self._store_status()
        if status is not _PUT_OK:
            return PutMessageResult(status, None, remark)
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "empty batch")
        first = msgs[0]
        topic = first.topic
        queue_id = first.queue_id
        for m in msgs:
            # one test per message for the common case; the refusals are told apart below
            if (
                m.topic != topic
                or m.queue_id != queue_id
                or m.sys_flag & TRANSACTION_ROLLBACK_TYPE
                or _DELAY in m.properties
            ):
                refused = self._batch_rule_broken(m, topic, queue_id)
                if refused is not None:
                    return refused
        begin = self.now_ms()
        planned = self._plan_batch(msgs)
        if planned.__class__ is PutMessageResult:
            self.stats.put_failed += 1
            return planned
        tails, crcs, sizes, total = planned
        if total + 8 > self.config.mapped_file_size_commit_log:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                None,
                f"{total} bytes do not fit in a CommitLog file of {self.config.mapped_file_size_commit_log}",
            )
        req = AppendRequest(
            msgs,
            tails,
            crcs,
            sizes,
            total,
            topic,
            queue_id,
            first.sys_flag,
            0,
            first.store_host,
            stall_append_ms,
            None,
            True,
        )
        return await self._submit(req, None, begin)

    async def put_message_group(
        self, msgs: list[MessageExtBrokerInner], *, stall_append_ms: int = 0
    ) -> list[PutMessageResult]:
        """Put each message as `put_message` would (any topics and queues; one refused, or one that fails,
        costs only its own result), in one pass: the store's status and the clock are read once, the
        records go in one after the other while the writer is idle (`CommitLog.append_group_now`: one
        section, one inline dispatch for the group; else queued to the writer, in order), the dispatch wait
        comes once for the group, the flush is woken once and, with SYNC_FLUSH, the group commit covers
        them all with one fsync. For a caller that holds several sends at once (all the SEND requests
        decoded from one read). Results in the order of `msgs`."""
        status, remark = self._store_status()
        if status is not _PUT_OK:
            return [PutMessageResult(status, None, remark) for _ in msgs]
        begin = self.now_ms()
        cl = self.commit_log
        n = len(msgs)
        results: list = [None] * n
        # the accepted ones, planned (as `_request` plans one, without building its AppendRequest)
        accepted: list[MessageExtBrokerInner] = []
        tails: list[bytes] = []
        crcs: list[int] = []
        sizes: list[int] = []
        refused = False  # a message was answered by its plan: `results` has holes only for the accepted ones
        file_size = self.config.mapped_file_size_commit_log
        max_body = self.config.max_message_size
        topics_ok = self._topics_ok
        heads = self._encoder.topic_heads
        for i, msg in enumerate(msgs):
            if _DELAY in msg.properties:
                self._rewrite_delay(msg)
            # `_plan` unrolled for the common message (a topic checked and encoded before, a body and properties
            # within the limits); anything else takes `_plan`, which tells the refusals apart
            body = msg.body
            ps = msg.properties_string
            props = ps.encode() if ps else b""
            if (
                msg.topic in topics_ok
                and (head := heads.get(msg.topic)) is not None
                and body is not None
                and len(body) <= max_body
                and len(props) <= MAX_PROPERTIES_LENGTH
            ):
                tail = b"".join((head, _SHORT.pack(len(props)), props))
                crc = crc32(body) & 0x7FFFFFFF
                size = FIXED_PART_LENGTH + len(body) + len(tail)
            else:
                plan = self._plan(msg)
                if plan.__class__ is PutMessageResult:
                    self.stats.put_failed += 1
                    results[i] = plan
                    refused = True
                    continue
                tail, crc, size = plan
            if size + 8 > file_size:
                results[i] = PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    None,
                    f"{size} bytes do not fit in a CommitLog file of {file_size}",
                )
                refused = True
                continue
            accepted.append(msg)
            tails.append(tail)
            crcs.append(crc)
            sizes.append(size)
        # where each accepted one is in msgs
        at = [i for i, result in enumerate(results) if result is None] if refused else range(n)
        # one pass of the CommitLog for the accepted ones while the writer is idle (each result the put's own,
        # PUT_OK or a failed write); the writer takes the rest (a new file, a stall), queued behind it in order
        times = cl.put_message_times_total
        appended = cl.append_group_now(accepted, tails, crcs, sizes, begin) if accepted and stall_append_ms <= 0 else []
        stored = cl.put_message_times_total - times
        last: AppendMessageResult | None = None  # the last one stored
        if appended:
            if stored < len(appended):  # (rare) a record whose write failed
                self.stats.put_failed += len(appended) - stored
            for result in reversed(appended):
                if (last := result.append_result) is not None:
                    break
            if len(appended) == n:  # (the common group: every message accepted and appended inline)
                results = appended
            else:
                for i, result in zip(at, appended):
                    results[i] = result
        queued: list[tuple[int, AppendRequest]] = []
        if len(appended) < len(accepted):  # (queued before any await: no other put may come between)
            create_future = asyncio.get_running_loop().create_future
            for k in range(len(appended), len(accepted)):
                req = AppendRequest.of_one(accepted[k], tails[k], crcs[k], sizes[k], stall_append_ms, create_future())
                cl.submit(req)
                queued.append((at[k], req))
        if last is not None:
            if not (self._pooled and cl.dispatch_queue) and self.dispatcher.after_inline_put():
                await self.reput.wait_dispatched(last.wrote_offset + last.wrote_bytes)
            self._inline_appends += len(appended)
            if self._inline_appends >= _YIELD_EVERY_INLINE:
                self._inline_appends = 0
                await asyncio.sleep(0)
        if queued:
            for i, req in queued:
                result = await req.future
                if result.__class__ is AppendMessageResult:
                    msgs[i].store_timestamp = result.store_timestamp
                    results[i] = PutMessageResult(_PUT_OK, result)
                    last = result
                    stored += 1
                else:
                    self.stats.put_failed += 1
                    results[i] = PutMessageResult(result.status, None, result.remark)
        if last is None:
            return results
        # the flush woken once for the group (ASYNC_FLUSH), or each stored one registered with the group commit
        # at once (SYNC_FLUSH: one fsync covers them all)
        after_put = self._after_put
        if self.config.flush_disk_type == FlushDiskType.SYNC_FLUSH:
            waits: list[tuple[PutMessageResult, Awaitable[PutMessageStatus]]] = []
            for msg, result in zip(msgs, results):
                ar = result.append_result
                if ar is not None and (waiting := after_put(ar, msg, msg.topic)) is not None:
                    waits.append((result, waiting))
            if waits:
                statuses = await asyncio.gather(*(waiting for _, waiting in waits))
                for (result, _), status in zip(waits, statuses):
                    result.status = status
        else:
            after_put(last, None, "")  # (wakes the flush or commit service; nothing to wait for)
        self.stats.put_done_many(stored, self.now_ms() - begin)
        return results

    @staticmethod
    def _batch_rule_broken(m: MessageExtBrokerInner, topic: str, queue_id: int) -> PutMessageResult | None:
        if m.topic != topic or m.queue_id != queue_id:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, None, "a batch must target one topic and one queue"
            )
        if m.sys_flag & TRANSACTION_ROLLBACK_TYPE:  # transaction_value(m.sys_flag) != TRANSACTION_NOT_TYPE
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "batch messages cannot be transactional")
        if m.delay_time_level > 0:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "batch messages cannot be delayed")
        return None

    async def _submit(self, req: AppendRequest, msg: MessageExtBrokerInner | None, begin: int) -> PutMessageResult:
        cl = self.commit_log
        result: AppendMessageResult | AppendFailure | None = cl.append_now(req, begin) if req.stall_ms <= 0 else None
        if result is not None:
            if self._pooled and cl.dispatch_queue:
                # records in a pool buffer: readable, so dispatched, once the commit service wrote them
                # (it wakes the reput); a put does not wait for that, as upstream's does not
                pass
            elif self.dispatcher.after_inline_put():
                # records the inline dispatch left to the reput, or keys that need the next index
                # file: a round of the reput does both (awaiting the file) before the put returns
                await self.reput.wait_dispatched(result.wrote_offset + result.wrote_bytes)
            self._inline_appends += 1
            if self._inline_appends >= _YIELD_EVERY_INLINE:
                # a caller putting in a loop would otherwise never let the event loop run
                self._inline_appends = 0
                await asyncio.sleep(0)
        else:
            req.future = asyncio.get_running_loop().create_future()
            cl.submit(req)
            result = await req.future
        if result.__class__ is AppendFailure:
            self.stats.put_failed += 1
            return PutMessageResult(result.status, None, result.remark)
        if msg is not None:
            msg.store_timestamp = result.store_timestamp
        waiting = self._after_put(result, msg, req.topic)
        status = _PUT_OK if waiting is None else await waiting
        self.stats.put_done(self.now_ms() - begin)
        return PutMessageResult(status, result)
