"""The SEND path's group put in one pass: each message a row, planned, written, entered in its consume queue,
its index keys queued and its arrival announced in one loop (issue 15).

`MessagePutter.put_message_group` walks a group four times (plan, write, dispatch, results) over messages the
processor built as `MessageExtBrokerInner`s, each step re-reading the message's fields and handing lists to the
next. For the sends decoded from one read, the processor hands over rows instead (`SendRow`: the message's
fields as one tuple, in `MessageExtBrokerInner`'s field order, without the two that are always 0 here) and
`SendRowPut.put` does the common record in one loop: no message object, no `AppendRequest`, no per-step lists, no
result object (a stored row's result is a `(msg_id, queue_offset, size)` tuple).

It takes a record only when the general path would do exactly this with it: the writer idle, an ASYNC_FLUSH store
without a transient pool, the reput caught up and the index file present; a topic the putter checked before;
bytes for a body within the limits; no transaction type, no DELAY; room for the record in the file without a
BLANK and no staged pwrite (the pre-fault window ahead); a consume queue that exists and whose next entry goes
after the last in its current file (`ConsumeQueue.try_append`'s rule). At the first row that is anything else
(or an item that is a message, not a row) it stops, and that row and the rest go through `put_message_group`
as messages (`MessageExtBrokerInner(*row)`, written back into the caller's list: the caller reads what the store
made of them, e.g. a DELAY's SCHEDULE_TOPIC queue). Everything before it is complete by then (records,
entries, keys, notices), so the records stay in order and each row costs what its put costs alone.
`tests/store/test_store_send_rows.py` pins the bytes, entries, index, notices and results against
`put_message_group` over hypothesis groups, and each stop.

The loop is `CommitLog._write_group`, `CommitLogDispatcher._dispatch_group` and `ConsumeQueue.try_append` unrolled
into one: it reads and moves their state (the writer's idle flags, record Structs and offset-id prefixes, the
dispatcher's index lists and listener, the queue's last file) as their own unrolled loops do; a change to what an
append or a dispatch does is also a change here.
"""

from __future__ import annotations

import asyncio
import struct
from itertools import repeat
from typing import TYPE_CHECKING, Any

import structlog

from store.config import OS_PAGE_SIZE, FlushDiskType
from store.message import (
    END_FILE_MIN_BLANK_LENGTH,
    FIXED_PART_LENGTH,
    IPV4_HOSTS_MASK,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageConst,
    MessageExtBrokerInner,
    offset_msg_id_prefix,
)
from store.results import AppendMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from store.put_message import MessagePutter

log = structlog.get_logger(__name__)

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - optional speed-up (store.message picks the same)
    from zlib import crc32

# (topic, queue_id, flag, body, properties, properties_string, tags_code, sys_flag, born_timestamp, born_host,
#  store_host, reconsume_times): `MessageExtBrokerInner(*row)` is the same message. tags_code must be
# `tags_hash(properties.get("TAGS"))`, as the processor builds it (the consume queue entry takes it as is).
SendRow = tuple

_SHORT = struct.Struct(">h")
_ENTRY = struct.Struct(">qiq")  # a consume queue entry (store.consume_queue)
_CQ_UNIT = 20
_PUT_OK = PutMessageStatus.PUT_OK
_DELAY = MessageConst.DELAY
_KEYS = MessageConst.KEYS
_UNIQ_KEY = MessageConst.UNIQ_KEY
_KEY_SEPARATOR = MessageConst.KEY_SEPARATOR
_YIELD_EVERY_INLINE = 64  # as MessagePutter: appends on the caller's stack in a row before a put yields


class SendRowPut:
    """`put` for one putter (its CommitLog, dispatcher and reput); holds no state of its own."""

    def __init__(self, putter: MessagePutter) -> None:
        self.putter = putter
        self.commit_log = putter.commit_log
        self.dispatcher = putter.dispatcher
        self.reput = putter.reput
        self._async_flush = putter.config.flush_disk_type != FlushDiskType.SYNC_FLUSH

    async def put(self, items: list[Any]) -> list[Any]:
        """Put each item (a `SendRow`, or a `MessageExtBrokerInner`) as `put_message_group` would, in order.
        Results in the order of `items`: `(msg_id, queue_offset, size)` for a row stored in the one pass, else
        the item's `PutMessageResult` (its row, if it was one, replaced in `items` by the message put)."""
        putter = self.putter
        cl = self.commit_log
        d = self.dispatcher
        reput = self.reput
        mf = cl.mapped_file_queue.last_mapped_file()
        if (
            cl._pending
            or cl._in_section
            or cl._closed
            or cl._writer_task is None
            or cl.fault.stall_append_until_ms
            or not self._async_flush
            or putter._pooled
            or mf is None
            or mf.is_full()
            or mf.write_buffer is not None
            or reput.reput_from_offset != mf.file_from_offset + mf.wrote_position
            or reput.running
            or cl.dispatch_queue
            or (d._index_enabled and d.index_service.needs_file())
            or putter._store_status()[0] is not _PUT_OK
        ):
            return await self._general(items, 0, [])
        begin = store_ts = putter.now_ms()
        cl.begin_time_in_lock = begin
        results: list[Any] = []
        pos = start = mf.wrote_position
        last_end = mf.file_size - END_FILE_MIN_BLANK_LENGTH  # a record must end by here (room for a BLANK after it)
        base = mf.file_from_offset
        view = mf.write_view
        prefaulted = mf.prefaulted_position
        table = cl.topic_queue_table
        encoder = cl.encoder
        heads = encoder.topic_heads
        hosts = encoder.host_bytes
        records = cl._record_structs
        topics_ok = putter._topics_ok
        max_body = putter.config.max_message_size
        queues_of = d.consume_queue_table
        index = d._index_enabled
        index_keys, index_phys, index_times = d._index_keys, d._index_phys, d._index_times
        listener = d.message_arriving_listener if d._listening else None
        last_born = last_store = None
        born_ip = store_ip = b""
        born_port = store_port = 0
        id_base = 0
        last_topic = None
        last_queue_id = -1
        cq: Any = None
        cq_mf: Any = None
        cq_view: Any = None
        cq_last = cq_pos = queue_offset = 0
        key: Any = None
        queues_seen: dict[tuple[str, int], tuple] = {}  # the queues written in this loop: their topic head and file
        rec: Any = None
        rec_size = rec_body = -1
        head = b""
        short = _SHORT.pack
        entry = _ENTRY.pack_into
        complete = False  # (False after an exception: the records before the one that raised stay, announced)
        try:
            for row in items:
                try:  # (a message, not a row, does not unpack: it and the rest go the general way)
                    topic, queue_id, flag, body, props, text, tags_code, sys_flag, born_ts, born, store, reconsume = row
                except TypeError:
                    break
                # the general path's plan (`put_message_group`), for what it takes without a question
                if (
                    sys_flag & TRANSACTION_ROLLBACK_TYPE
                    or body.__class__ is not bytes
                    or (body_length := len(body)) > max_body
                    or _DELAY in props
                ):
                    break
                props_bytes = text.encode()
                if len(props_bytes) > MAX_PROPERTIES_LENGTH:
                    break
                if topic != last_topic or queue_id != last_queue_id:
                    # another queue than the previous row's
                    key = (topic, queue_id)
                    seen = queues_seen.get(key)
                    if seen is not None:  # one this loop wrote to before: its next entry follows from that one
                        head, cq, cq_mf, cq_view, cq_last = seen
                        queue_offset = table[key]
                        cq_pos = cq_mf.wrote_position
                    else:
                        # its topic checked and encoded before, its consume queue and next entry
                        # (`ConsumeQueue.try_append`'s rule)
                        if (head := heads.get(topic)) is None or topic not in topics_ok:
                            break
                        queues = queues_of.get(topic)
                        if queues is None or (cq := queues.get(queue_id)) is None:
                            break  # a queue's first entry: created by the general path's dispatch
                        cq_files = cq.mapped_file_queue.mapped_files
                        if not cq_files:
                            break
                        cq_mf = cq_files[-1]
                        cq_view = cq_mf.write_view
                        cq_last = cq_mf.file_size - _CQ_UNIT
                        queue_offset = table.get(key, 0)
                        cq_pos = cq_mf.wrote_position
                        if (
                            cq_pos == 0
                            or cq_mf.file_from_offset + cq_pos != queue_offset * _CQ_UNIT
                            or base + pos < cq.max_physic_offset  # (an entry not after the last: the general path's)
                        ):
                            break
                        queues_seen[key] = (head, cq, cq_mf, cq_view, cq_last)
                    last_topic, last_queue_id = topic, queue_id
                else:  # the previous row's queue: the next queue offset and entry
                    queue_offset += 1
                    cq_pos += _CQ_UNIT
                if cq_pos > cq_last:
                    break  # the queue's next file: made by the general path (the reput, in a worker thread)
                tail = head + short(len(props_bytes)) + props_bytes  # (+ is cheaper than a join for three)
                size = FIXED_PART_LENGTH + body_length + len(tail)
                if (end := pos + size) > last_end or (end > prefaulted and size >= OS_PAGE_SIZE):
                    break  # a BLANK and the next file, or a staged pwrite: the writer's and the general path's
                phy = base + pos
                if born is not last_born:
                    last_born = born
                    born_ip = hosts.get(born[0]) or encoder.host(born[0])
                    born_port = born[1]
                if store is not last_store:
                    last_store = store
                    store_ip = hosts.get(store[0]) or encoder.host(store[0])
                    store_port = store[1]
                    prefix = cl._id_prefix.get(store)
                    if prefix is None:
                        prefix = cl._id_prefix[store] = offset_msg_id_prefix(*store)
                    id_base = int(prefix, 16) << 64
                # the record in one pack_into (as `CommitLog._write_group`)
                if size != rec_size or body_length != rec_body:  # (the record's Struct: one for a run of one shape)
                    rec = records.get((body_length, len(tail))) or cl._record_struct(body_length, len(tail))
                    rec_size, rec_body = size, body_length
                rec.pack_into(
                    view,
                    pos,
                    size,
                    MESSAGE_MAGIC_CODE,
                    crc32(body) & 0x7FFFFFFF,
                    queue_id,
                    flag,
                    queue_offset,
                    phy,
                    sys_flag & IPV4_HOSTS_MASK,
                    born_ts,
                    born_ip,
                    born_port,
                    store_ts,
                    store_ip,
                    store_port,
                    reconsume,
                    0,
                    body_length,
                    body,
                    tail,
                )
                table[key] = queue_offset + 1
                pos = end
                mf.wrote_position = end  # (readable before its arrival is announced)
                entry(cq_view, cq_pos, phy, size, tags_code)
                cq_mf.wrote_position = cq_mf.committed_position = cq_pos + _CQ_UNIT
                cq.max_physic_offset = base + end
                if index:
                    keys = props.get(_KEYS)
                    if keys and _KEY_SEPARATOR in keys:
                        d._queue_index_keys(topic, props.get(_UNIQ_KEY), keys, phy, store_ts)
                    else:  # (index_keys inlined for at most one key each)
                        # (their store times, all `store_ts`, are added for the group after the loop)
                        if uniq := props.get(_UNIQ_KEY):
                            index_keys.append(f"{topic}#{uniq}")
                            index_phys.append(phy)
                        if keys:
                            index_keys.append(f"{topic}#{keys}")
                            index_phys.append(phy)
                results.append(("%032X" % (id_base | phy), queue_offset, size))  # (the offset id: host, port, offset)
                if listener is not None:
                    try:
                        listener(topic, queue_id, queue_offset + 1, tags_code, store_ts, props)
                    except Exception:  # as the dispatcher's: the record is stored and entered all the same
                        log.exception("message arriving listener failed", topic=topic)
            complete = True
        finally:
            if len(index_times) < len(index_keys):  # (one store time a key queued above)
                index_times.extend(repeat(store_ts, len(index_keys) - len(index_times)))
            stored = len(results)
            if stored:
                end = base + pos if complete else base + start + sum([r[2] for r in results])
                mf.store_timestamp = store_ts
                pf = cl.prefault
                if pf is not None and end >= pf.wake_offset:
                    pf.wakeup()
                cl.put_message_times_total += stored
                cl.put_message_size_total += end - base - start
                if d.checkpoint is not None:
                    d.checkpoint.logics_msg_timestamp = store_ts
                reput.reput_from_offset = end
                reput.dispatched_total += stored
            cl.begin_time_in_lock = 0
        cl._account(begin)
        if stored < len(items):  # the rest, appended before anything here awaits (the records stay in order)
            return await self._general(items, stored, results, begin if stored else None, base + pos)
        await self._after(stored, begin, base + pos)
        return results

    async def _general(
        self, items: list[Any], start: int, results: list[Any], begin: int | None = None, end: int = 0
    ) -> list[Any]:
        """Items start.. through `put_message_group`, each row made the message it describes (written back into
        `items`). `begin`: the one pass stored items ..start, up to CommitLog offset `end`; their put's last steps
        come after the rest's append, which runs before anything awaits (the group's records stay back to back)."""
        rest = items[start:]
        for k, item in enumerate(rest):
            if item.__class__ is tuple:
                rest[k] = items[start + k] = MessageExtBrokerInner(*item)
        results.extend(await self.putter.put_message_group(rest))
        if begin is not None:
            await self._after(start, begin, end)
        return results

    async def _after(self, stored: int, begin: int, end: int) -> None:
        """`put_message_group`'s last steps for the `stored` records of the one pass, ending at CommitLog `end`."""
        if not stored:
            return
        putter = self.putter
        if self.dispatcher.after_inline_put():
            await self.reput.wait_dispatched(end)
        putter._inline_appends += stored
        if putter._inline_appends >= _YIELD_EVERY_INLINE:
            putter._inline_appends = 0
            await asyncio.sleep(0)
        # (ASYNC_FLUSH only: wakes the flush or commit service, reads nothing of the result)
        putter._after_put(AppendMessageResult(end, 0, "", 0, 0), None, "")
        putter.stats.put_done_many(stored, putter.now_ms() - begin)
