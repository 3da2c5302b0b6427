"""CommitLogDispatcher: from appended records to consume queue entries, index keys and arrival notices.

Upstream's CommitLogDispatcher chain (build consume queue, build index) plus the message arriving
listener, in one object that owns what they write: the consume-queue table, the index keys waiting for
the next bulk build, and the record of queues that failed. Three callers feed it, all with the same
effects per record:

- the CommitLog writer, inline, while the reput is caught up (`dispatch_appended`: no DispatchRequest
  built, a batch in one pass; `dispatch_group`: the single sends of one group, any queues, in one call);
- the reput, record by record (`prepare` creates missing files first, then `dispatch`), for a batch
  descriptor (`dispatch_described_batch`) and in bulk from parsed arrays (`dispatch_many`, also used by
  the pre-dispatch during recovery); each round ends with `end_round` (the index keys in one pass);
- the put path, which asks it to schedule the deferred index build (`after_inline_put`).

A record or queue that cannot be dispatched costs its consume queue entry only: one error line per
queue, never the writer or the reput. The inline paths (`_dispatch_group`, which the single puts share) and
the batch path repeat `dispatch` for speed and stay next to it: a change to what a dispatch does is one edit in
three places of this file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import structlog

from store.checkpoint import StoreCheckpoint
from store.commit_log import AppendRequest, CommitLog, DispatchBatch
from store.config import BrokerRole, MessageStoreConfig
from store.consume_queue import ConsumeQueue
from store.index_service import IndexService, index_keys
from store.mapped_file_queue import MappedFileQueue, RunBlocking
from store.message import (
    RMQ_SYS_SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageConst,
    MessageExtBrokerInner,
    decode_properties,
    transaction_value,
)
from store.path_guard import UnsafeStorePath
from store.record_parser import DispatchRequest, ParsedRecords

if TYPE_CHECKING:
    from store.reput import ReputMessageService

log = structlog.get_logger(__name__)

MessageArrivingListener = Callable[[str, int, int, int, int, dict | None], None]
# (rows, results, store_timestamp, topics): the arrivals of the rows of a group the store put in its one pass
# (`store.send_rows`), in CommitLog order: row k (a `SendRow`) has the result results[k], `(msg_id, queue_offset,
# size)`, its queue's new max offset queue_offset + 1; rows past len(results) were not stored there (not announced
# here); all stored at `store_timestamp`; `topics` holds every topic among them (and maybe others)
RowsArrivingListener = Callable[[list, list, int, Collection[str]], None]

# keys of inline appends are indexed in one vectorised pass: at most this long after the put, or at once when
# this many are waiting. A pass costs ~100-200 us of numpy calls before its first key (then ~0.3 us a key), so
# at the SEND path's rates (5-20k keys/s) 5 ms gave passes of 30-100 keys at 2-7 us a key, ~10 % of a send's
# loop CPU; 20 ms gives passes of 100-400 keys at ~1-2 us, each pass still well under a millisecond of loop.
# Upstream's reput indexes behind the writer too; a QUERY_MESSAGE builds what is waiting first, and a
# restart after a crash re-indexes from where the index files end (StoreRecovery).
INDEX_BUILD_DELAY_S = 0.02
INDEX_BUILD_BATCH = 4096
_TAGS = MessageConst.TAGS
_KEYS = MessageConst.KEYS
_UNIQ_KEY = MessageConst.UNIQ_KEY
_KEY_SEPARATOR = MessageConst.KEY_SEPARATOR


class CommitLogDispatcher:
    def __init__(
        self,
        config: MessageStoreConfig,
        commit_log: CommitLog,
        index_service: IndexService,
        *,
        run_blocking: RunBlocking,
        unlink: Callable[[str], object],
        queue_created: Callable[[str, int], None],
    ) -> None:
        """`queue_created(topic, queue_id)` is told about each consume queue created on first use (the
        store's queue manifest). The reput is bound once it exists (`bind_reput`): the inline path
        dispatches only while the reput is caught up, and moves its position."""
        self.config = config
        self.commit_log = commit_log
        self.index_service = index_service
        self._run_blocking = run_blocking
        self._unlink = unlink
        self._queue_created = queue_created
        self.reput: ReputMessageService | None = None
        self.checkpoint: StoreCheckpoint | None = None  # set while the store is loaded
        self.message_arriving_listener: MessageArrivingListener | None = None
        # the same notices for a group of rows in one call (`announce_rows`); None: one listener call a row
        self.rows_arriving_listener: RowsArrivingListener | None = None
        self.running = False  # the store runs: arrival notices of bulk dispatches are worth sending
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self._dispatch_failures: set[tuple[str, int]] = set()  # queues already reported by failed()
        self._unwritable_queues: set[tuple[str, int]] = set()  # whose next file could not be created
        self._index_enabled = config.message_index_enable
        # a slave announces no arrivals (its role is fixed for the store's life)
        self._listening = config.broker_role != BrokerRole.SLAVE
        # index keys dispatched but not yet written: built in one vectorised pass per dispatch round
        self._index_keys: list[str] = []
        self._index_phys: list[int] = []
        self._index_times: list[int] = []
        # the pending bulk index build of inline appends' keys (None: none scheduled)
        self._index_build_handle: asyncio.TimerHandle | None = None

    def bind_reput(self, reput: ReputMessageService) -> None:
        self.reput = reput

    async def after_append_section(self) -> None:
        """After each writer section: dispatch what became readable, so that (without a transient pool,
        where bytes become readable only once committed) a put returns after its consume queue entry
        exists and its arrival was announced."""
        assert self.reput is not None
        await self.reput.wait_dispatched(self.commit_log.get_max_offset())

    def new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(
            topic,
            queue_id,
            self.config.store_path_consume_queue,
            self.config.mapped_file_size_consume_queue,
            run_blocking=self._run_blocking,
            unlink=self._unlink,
        )

    def after_inline_put(self) -> bool:
        """After a put the writer appended on the caller's stack: True when the put must wait for a
        round of the reput (records left to it, or keys that need the next index file); otherwise the
        waiting index keys are built now (a full batch) or scheduled for a moment later."""
        keys = self._index_keys
        if self.commit_log.dispatch_queue or (keys and self.index_service.room() < len(keys)):
            return True
        if keys:
            if len(keys) >= INDEX_BUILD_BATCH:
                self.deferred_index_build()
            elif self._index_build_handle is None:
                self._index_build_handle = asyncio.get_running_loop().call_later(
                    INDEX_BUILD_DELAY_S, self.deferred_index_build
                )
        return False

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created on first use; UnsafeStorePath (nothing created) for a topic that cannot be a
        folder inside the store."""
        queues = self.consume_queue_table.get(topic)
        cq = None if queues is None else queues.get(queue_id)
        if cq is None:
            cq = self.new_consume_queue(topic, queue_id)
            if queues is None:
                queues = self.consume_queue_table[topic] = {}
            queues[queue_id] = cq
            self._queue_created(topic, queue_id)
        return cq

    def failed(self, what: str, topic: str, queue_id: int, exc: BaseException) -> None:
        """One record (or queue) that cannot be dispatched costs its consume queue entry, never the writer
        or the reput: one error line per queue (a bad queue could otherwise log once per record)."""
        key = (topic, queue_id)
        if key in self._dispatch_failures:
            return
        if len(self._dispatch_failures) < 1024:
            self._dispatch_failures.add(key)
        log.error(
            "dispatch failed, the record stays in the CommitLog without a consume queue entry",
            step=what,
            topic=topic[:200],
            queue_id=queue_id,
            error=f"{type(exc).__name__}: {exc}",
            exc_info=not isinstance(exc, UnsafeStorePath),
        )

    def _queue_for_dispatch(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        try:
            return self.find_consume_queue(topic, queue_id)
        except UnsafeStorePath as exc:
            self.failed("queue", topic, queue_id, exc)
            return None

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self.consume_queue_table.get(topic)
        return None if queues is None else queues.get(queue_id)

    def prepare(self, req: DispatchRequest) -> Any:
        tran = transaction_value(req.sys_flag)
        if tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE:
            cq = self._queue_for_dispatch(req.topic, req.queue_id)
            if (
                cq is not None
                and cq.needs_file_for(req.consume_queue_offset)
                and req.commit_log_offset + req.msg_size > cq.max_physic_offset
                and (req.topic, req.queue_id) not in self._unwritable_queues
            ):
                return self._guarded(cq.ensure_file_for(req.consume_queue_offset), req.topic, req.queue_id)
        if self._index_enabled and self.index_service.needs_file():
            return self.index_service.ensure_file()
        return None

    async def _guarded(self, pending: Awaitable[Any], topic: str, queue_id: int) -> None:
        """A consume queue file that cannot be created: logged, and the dispatch of the record fails alone."""
        try:
            await pending
        except Exception as exc:  # noqa: BLE001 - e.g. EACCES, ENAMETOOLONG: one queue, not the reput
            # from now on its records go straight to dispatch (which tries, fails alone): no retry loop here
            self._unwritable_queues.add((topic, queue_id))
            self.failed("create file", topic, queue_id, exc)

    def dispatch(self, req: DispatchRequest) -> None:
        try:
            self._dispatch_one(req)
        except Exception as exc:  # noqa: BLE001 - never stop the reput for the records after this one
            self.failed("record", req.topic, req.queue_id, exc)

    def _dispatch_one(self, req: DispatchRequest) -> None:
        tran = transaction_value(req.sys_flag)
        if tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE:
            cq = self._queue_for_dispatch(req.topic, req.queue_id)
            if cq is None:
                pass
            elif cq.put_message_position_info(
                req.commit_log_offset, req.msg_size, req.tags_code, req.consume_queue_offset
            ):
                if self.checkpoint is not None:
                    self.checkpoint.logics_msg_timestamp = req.store_timestamp
            else:
                log.error("[BUG] put commit log position info failed", topic=req.topic, queue_id=req.queue_id)
        if self._index_enabled and tran != TRANSACTION_ROLLBACK_TYPE:
            self._queue_index_keys(req.topic, req.uniq_key, req.keys, req.commit_log_offset, req.store_timestamp)
        listener = self.message_arriving_listener
        if listener is not None and self._listening:
            try:
                listener(
                    req.topic,
                    req.queue_id,
                    req.consume_queue_offset + 1,
                    req.tags_code,
                    req.store_timestamp,
                    req.properties,
                )
            except Exception:
                log.exception("message arriving listener failed", topic=req.topic)

    def dispatch_appended(self, req: AppendRequest, phy: int, queue_offset: int, store_ts: int) -> int:
        """The writer's inline dispatch (same effects as `dispatch` per record, without building
        DispatchRequests): only while the reput is caught up to this request and every file the records
        need exists. Returns how many records were dispatched; the reput takes the rest (all of them,
        replaying what was done, if the dispatch failed: the writer must go on whatever one record does)."""
        reput = self.reput
        if reput.reput_from_offset != phy or reput.running or self.commit_log.dispatch_queue:
            return 0
        if self._index_enabled and self.index_service.needs_file():
            return 0
        try:
            if req.phys is not None and self._dispatch_batch(req, queue_offset, store_ts):
                return len(req.msgs)
            return self._dispatch_records(req, phy, queue_offset, store_ts)
        except Exception as exc:  # noqa: BLE001
            self.failed("inline", req.topic, req.queue_id, exc)
            return 0

    def dispatch_group(
        self, msgs: list[MessageExtBrokerInner], sizes: list[int], queue_offsets: list[int], phy: int, store_ts: int
    ) -> int:
        """The writer's inline dispatch of a group of single records written back to back from `phy` (any
        topics and queues; `CommitLog.append_group_now`), with the same effects per record as `dispatch`, in
        one call: the reput and index checks once for the group, the consume queue looked up again only when
        the queue changes. Returns how many leading records were dispatched; the reput takes the rest."""
        reput = self.reput
        if reput.reput_from_offset != phy or reput.running or self.commit_log.dispatch_queue:
            return 0
        if self._index_enabled and self.index_service.needs_file():
            return 0
        queued_keys = len(self._index_keys)
        try:
            return self._dispatch_group(msgs, sizes, queue_offsets, phy, store_ts)
        except Exception as exc:  # noqa: BLE001 - the reput replays the group: the writer must go on
            self.failed("inline", msgs[0].topic, msgs[0].queue_id, exc)
            # the replay queues the group's index keys again (its consume queue entries it skips)
            del self._index_keys[queued_keys:], self._index_phys[queued_keys:], self._index_times[queued_keys:]
            return 0

    def _dispatch_group(
        self, msgs: list[MessageExtBrokerInner], sizes: list[int], queue_offsets: Iterable[int], phy: int, store_ts: int
    ) -> int:
        """`dispatch_group` record by record, unrolled (the SEND path's hot loop; `_dispatch_records` runs it for
        the records of one request): stops where a consume queue needs its next file, which the reput creates."""
        index = self._index_enabled
        index_keys, index_phys, index_times = self._index_keys, self._index_phys, self._index_times
        listener = self.message_arriving_listener if self._listening else None
        parser = self.commit_log.parser
        tags_codes = parser.tags_cache  # TAGS → hash (the common case, inlined)
        table = self.consume_queue_table
        last_topic = None
        last_queue_id = -1
        cq: ConsumeQueue | None = None
        entered = False  # a consume queue entry was written (the checkpoint's logics time moves)
        done = 0
        for m, size, qo in zip(msgs, sizes, queue_offsets):
            topic = m.topic
            queue_id = m.queue_id
            props = m.properties
            tran = m.sys_flag & TRANSACTION_ROLLBACK_TYPE
            if topic == RMQ_SYS_SCHEDULE_TOPIC or (tags_code := tags_codes.get(props.get(_TAGS))) is None:
                tags_code = parser.dispatch_tags_code(topic, props, store_ts)
            if tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE:
                if topic != last_topic or queue_id != last_queue_id:
                    queues = table.get(topic)
                    if queues is None or (cq := queues.get(queue_id)) is None:
                        cq = self._queue_for_dispatch(topic, queue_id)
                    last_topic, last_queue_id = topic, queue_id
                if cq is not None:
                    if not cq.try_append(phy, size, tags_code, qo):
                        if cq.needs_file_for(qo) and phy + size > cq.max_physic_offset:
                            break  # the file is created in a worker thread: the reput continues from here
                        if not cq.put_message_position_info(phy, size, tags_code, qo):
                            log.error("[BUG] put commit log position info failed", topic=topic, queue_id=queue_id)
                    entered = True
            if index and tran != TRANSACTION_ROLLBACK_TYPE:
                keys = props.get(_KEYS)
                if keys and _KEY_SEPARATOR in keys:
                    self._queue_index_keys(topic, props.get(_UNIQ_KEY), keys, phy, store_ts)
                else:  # (index_keys inlined for at most one key each)
                    if uniq := props.get(_UNIQ_KEY):
                        index_keys.append(f"{topic}#{uniq}")
                        index_phys.append(phy)
                        index_times.append(store_ts)
                    if keys:
                        index_keys.append(f"{topic}#{keys}")
                        index_phys.append(phy)
                        index_times.append(store_ts)
            if listener is not None:
                try:
                    listener(topic, queue_id, qo + 1, tags_code, store_ts, props)
                except Exception:
                    log.exception("message arriving listener failed", topic=topic)
            phy += size
            done += 1
        if entered and self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = store_ts
        reput = self.reput
        reput.reput_from_offset = phy
        reput.dispatched_total += done
        return done

    def _dispatch_records(self, req: AppendRequest, phy: int, queue_offset: int, store_ts: int) -> int:
        """`dispatch_appended` record by record (a single put, or a batch `_dispatch_batch` does not
        take): `_dispatch_group`'s loop over the request's records, whose queue offsets follow one another
        (a prepared or rolled-back transaction takes none: each record then reports the request's)."""
        n = len(req.msgs)
        tran = req.sys_flag & TRANSACTION_ROLLBACK_TYPE
        if tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE:
            queue_offsets = range(queue_offset, queue_offset + n)
        else:
            queue_offsets = repeat(queue_offset, n)
        return self._dispatch_group(req.msgs, req.sizes, queue_offsets, phy, store_ts)

    def dispatch_described_batch(self, batch: DispatchBatch) -> bool:
        """The reput's path for a batch descriptor (a batch in a pool buffer, now committed)."""
        if self._index_enabled and self.index_service.needs_file():
            return False
        return self._dispatch_batch(batch.request, batch.consume_queue_offset, batch.store_timestamp)

    def _dispatch_batch(self, req: AppendRequest, queue_offset: int, store_ts: int) -> bool:
        """`_dispatch_appended` for a batch the writer just appended (one topic and queue, no
        transaction, no delay) in list passes instead of a loop over records: every consume queue entry
        in one `try_append_many`, the index keys extended at once. False (nothing done) when that does
        not apply: the record-by-record loop then handles it."""
        topic = req.topic
        phys = req.phys
        if topic == RMQ_SYS_SCHEDULE_TOPIC or req.sys_flag & TRANSACTION_ROLLBACK_TYPE or phys is None:
            return False
        parser = self.commit_log.parser
        props = [m.properties for m in req.msgs]
        cache = parser.tags_cache
        codes = [cache.get(p.get(_TAGS)) for p in props]
        if None in codes:
            codes = [parser.tags_code_of(p.get(_TAGS)) for p in props]
        cq = self._queue_for_dispatch(topic, req.queue_id)
        if cq is None or not cq.try_append_many(phys, req.sizes, codes, queue_offset):
            return False
        if self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = store_ts
        n = len(phys)
        if self._index_enabled:
            # the common batch: a UNIQ_KEY each and no KEYS (None marks a record that has KEYS)
            uniqs = [None if _KEYS in p else p.get(_UNIQ_KEY) for p in props]
            if all(uniqs):
                prefix = topic + "#"
                self._index_keys.extend([prefix + u for u in uniqs])
                self._index_phys.extend(phys)
                self._index_times.extend([store_ts] * n)
            else:
                for p, phy in zip(props, phys):
                    self._queue_index_keys(topic, p.get(_UNIQ_KEY), p.get(_KEYS), phy, store_ts)
        listener = self.message_arriving_listener
        if listener is not None and self._listening:
            queue_id = req.queue_id
            for i in range(n):
                try:
                    listener(topic, queue_id, queue_offset + i + 1, codes[i], store_ts, props[i])
                except Exception:
                    log.exception("message arriving listener failed", topic=topic)
        self.reput.reput_from_offset = phys[-1] + req.sizes[-1]
        self.reput.dispatched_total += n
        return True

    async def dispatch_many(self, recs: ParsedRecords) -> None:
        """`dispatch` for records parsed in bulk (recovery, rebuilds): the entries of each queue in one
        vectorised write, the index keys into the round's batch, arrival notices only once the store
        runs (before that nobody can be waiting)."""
        tran = recs.sys_flag & TRANSACTION_ROLLBACK_TYPE
        to_cq = (tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE)
        if to_cq.any():
            qkey = (recs.topic_id << 32) | (recs.queue_id & 0xFFFFFFFF)
            qkey = np.where(to_cq, qkey, -1)
            _, first = np.unique(qkey, return_index=True)
            for k in qkey[np.sort(first)].tolist():
                if k < 0:
                    continue
                idx = np.flatnonzero(qkey == k)
                topic = recs.topics[k >> 32]
                queue_id = int(recs.queue_id[idx[0]])
                try:
                    cq = self.find_consume_queue(topic, queue_id)
                    failed = await cq.put_entries(
                        recs.phy[idx], recs.size[idx], recs.tags_code[idx], recs.queue_offset[idx]
                    )
                except Exception as exc:  # noqa: BLE001 - this queue's entries only
                    self.failed("bulk", topic, queue_id, exc)
                    continue
                if failed:
                    log.error(
                        "[BUG] put commit log position info failed", topic=topic, queue_id=queue_id, entries=failed
                    )
            if self.checkpoint is not None:
                self.checkpoint.logics_msg_timestamp = int(recs.store_ts[np.flatnonzero(to_cq)[-1]])
        if self._index_enabled and len(recs.key_record):
            self.build_index_keys()  # the round's earlier keys go first (CommitLog order)
            if self.index_service.needs_file():
                await self.index_service.ensure_file()
            keep = (tran != TRANSACTION_ROLLBACK_TYPE)[recs.key_record]  # no keys of rolled-back messages
            rec = recs.key_record[keep]
            self.index_service.build_hashed(recs.key_hash[keep], recs.phy[rec], recs.store_ts[rec])
        listener = self.message_arriving_listener
        if listener is not None and self.running and self._listening:
            props = recs.props or [b""] * len(recs)
            for i in range(len(recs)):
                topic = recs.topics[int(recs.topic_id[i])]
                try:
                    listener(
                        topic,
                        int(recs.queue_id[i]),
                        int(recs.queue_offset[i]) + 1,
                        int(recs.tags_code[i]),
                        int(recs.store_ts[i]),
                        decode_properties(props[i].decode("utf-8", errors="replace")),
                    )
                except Exception:
                    log.exception("message arriving listener failed", topic=topic)

    def deferred_index_build(self) -> None:
        """Index the keys of the puts appended inline since the last build, in one pass (at most
        INDEX_BUILD_DELAY_S after the first of them, or at once once INDEX_BUILD_BATCH wait)."""
        self.cancel_index_build()
        self.build_index_keys()
        if self._index_enabled and self.index_service.has_pending():
            self.reput.wakeup()  # its round ends with creating the next index file

    def cancel_index_build(self) -> None:
        handle, self._index_build_handle = self._index_build_handle, None
        if handle is not None:
            handle.cancel()

    def announce_rows(self, rows: list, results: list, store_ts: int, topics: Collection[str]) -> None:
        """The arrival notices of the rows of a group `store.send_rows` stored (see `RowsArrivingListener`): in one
        call when the broker takes them so, else one `message_arriving_listener` call a row, with the arguments a
        dispatch of the same record gives."""
        many = self.rows_arriving_listener
        if many is not None:
            try:
                many(rows, results, store_ts, topics)
            except Exception:  # as a notice's: the records are stored and entered all the same
                log.exception("rows arriving listener failed", rows=len(results))
            return
        listener = self.message_arriving_listener
        if listener is None:
            return
        for row, result in zip(rows, results):
            try:
                listener(row[0], row[1], result[1] + 1, row[5], store_ts, row[3])
            except Exception:
                log.exception("message arriving listener failed", topic=row[0])

    def _queue_index_keys(self, topic: str, uniq: str | None, keys: str | None, phy: int, store_ts: int) -> None:
        """Queue a record's index keys (UNIQ_KEY, each of KEYS) for the next bulk build."""
        for key in index_keys(topic, uniq, keys):
            self._index_keys.append(key)
            self._index_phys.append(phy)
            self._index_times.append(store_ts)

    def build_index_keys(self) -> None:
        if self._index_keys:
            keys, phys, times = self._index_keys, self._index_phys, self._index_times
            self._index_keys, self._index_phys, self._index_times = [], [], []
            self.index_service.build_keys(keys, phys, times)

    def end_round(self) -> Any:
        """Index what the round dispatched (one vectorised pass); an awaitable if an index file is needed."""
        self.build_index_keys()
        if self._index_enabled and self.index_service.has_pending():
            return self.index_service.ensure_file()
        return None

    def all_consume_queues(self) -> Iterable[ConsumeQueue]:
        for queues in list(self.consume_queue_table.values()):
            yield from list(queues.values())

    def consume_queue_files(self) -> Iterator[MappedFileQueue]:
        for cq in self.all_consume_queues():
            yield cq.mapped_file_queue
