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
from collections.abc import Awaitable
from itertools import repeat
from typing import TYPE_CHECKING, Any

import structlog

from store.config import OS_PAGE_SIZE, FlushDiskType
from store.message import (
    END_FILE_MIN_BLANK_LENGTH,
    FIXED_PART_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
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

# (topic, queue_id, body, properties, properties_string, tags_code, flag, sys_flag, born_timestamp, reconsume_times):
# the fields of a `MessageExtBrokerInner` that differ between a group's sends, in the order the loop reads them
# (`row_message` makes the message). The sender vouches for what the loop does not ask: the body is bytes, sys_flag
# has no transaction type and no IPv6 host flag (records carry IPv4 hosts: `IPV4_HOSTS_MASK` applied), the
# properties hold no DELAY (anything else is handed over as a message), and tags_code is
# `tags_hash(properties.get("TAGS"))` (the consume queue entry takes it as is). The store still asks what
# depends on its own settings: the body's and the properties' sizes against its limits.
SendRow = tuple

_ENTRY = struct.Struct(">qiq")  # a consume queue entry (store.consume_queue)
# a record's fixed part as the one pass writes it: the born host, the store time and the store host are one
# 24-byte field (the same for a whole group), the prepared transaction offset (0) pad bytes (`pack_into` zeroes
# them); then the body, the topic's head, the properties' length and the properties (`_record`)
_RECORD_FIXED = ">iiiiiqqiq24si8xi"
_MID = struct.Struct(">4siq4si")  # born ip, born port, store time, store ip, store port
assert struct.calcsize(_RECORD_FIXED) == FIXED_PART_LENGTH
_RECORDS_MAX = 64  # record Structs kept (a sender's records come in a few shapes; cleared when full)
_CQ_UNIT = 20
_PUT_OK = PutMessageStatus.PUT_OK
_KEYS = MessageConst.KEYS
_UNIQ_KEY = MessageConst.UNIQ_KEY
_KEY_SEPARATOR = MessageConst.KEY_SEPARATOR
_YIELD_EVERY_INLINE = 64  # as MessagePutter: appends on the caller's stack in a row before a put yields
# what the one pass hands `AfterPut` (ASYNC_FLUSH only, where it wakes the flush or commit service and reads nothing
# of the result): one placeholder rather than a result a group
_NO_RESULT = AppendMessageResult(0, 0, "", 0, 0)


def row_message(row: SendRow, born_host: tuple[str, int], store_host: tuple[str, int]) -> MessageExtBrokerInner:
    """The message a row describes (its sender's hosts given)."""
    topic, queue_id, body, props, text, tags_code, flag, sys_flag, born_ts, reconsume = row
    return MessageExtBrokerInner(
        topic, queue_id, flag, body, props, text, tags_code, sys_flag, born_ts, born_host, store_host, reconsume
    )


class SendRowPut:
    """`put` for one putter (its CommitLog, dispatcher and reput); holds no state of its own but the record
    Structs."""

    def __init__(self, putter: MessagePutter) -> None:
        self.putter = putter
        self.commit_log = putter.commit_log
        self.dispatcher = putter.dispatcher
        self.reput = putter.reput
        self._async_flush = putter.config.flush_disk_type != FlushDiskType.SYNC_FLUSH
        self._records: dict[tuple[int, int, int], struct.Struct] = {}
        # the last group's hosts as the record and the offset id take them (`_host_parts`): a connection's groups
        # come with the same two tuples, so a group asks by identity
        self._hosts: tuple = (None, None)

    def _open(self, cl: Any, mf: Any) -> bool:
        """Whether the one pass may append to `mf` now: the general path would append inline here (writer idle, no
        stall, ASYNC_FLUSH without a pool, the reput caught up, the index file present, the store writable)."""
        reput = self.reput
        d = self.dispatcher
        return not (
            cl._pending
            or cl._in_section
            or cl._closed
            or cl._writer_task is None
            or cl.fault.stall_append_until_ms
            or not self._async_flush
            or self.putter._pooled
            or mf is None
            or mf.is_full()
            or mf.write_buffer is not None
            or reput.reput_from_offset != mf.file_from_offset + mf.wrote_position
            or reput.running
            or cl.dispatch_queue
            or (d._index_enabled and d.index_service.needs_file())
            or self.putter._store_status()[0] is not _PUT_OK
        )

    def _host_parts(self, born_host: tuple[str, int], store_host: tuple[str, int]) -> tuple:
        """(born_host, store_host, born ip bytes, born port, store ip bytes, store port, the offset id's high bits),
        kept for the next group."""
        cl = self.commit_log
        encoder = cl.encoder
        prefix = cl._id_prefix.get(store_host)
        if prefix is None:
            prefix = cl._id_prefix[store_host] = offset_msg_id_prefix(*store_host)
        hosts = self._hosts = (
            born_host,
            store_host,
            encoder.host_bytes.get(born_host[0]) or encoder.host(born_host[0]),
            born_host[1],
            encoder.host_bytes.get(store_host[0]) or encoder.host(store_host[0]),
            store_host[1],
            int(prefix, 16) << 64,
        )
        return hosts

    def _record(self, body_length: int, head_length: int, props_length: int) -> struct.Struct:
        """The `Struct` of a whole record with a body, a topic head and properties of these lengths (bounded)."""
        records = self._records
        if len(records) >= _RECORDS_MAX:
            records.clear()
        rec = records[(body_length, head_length, props_length)] = struct.Struct(
            f"{_RECORD_FIXED}{body_length}s{head_length}sh{props_length}s"
        )
        return rec

    async def put(self, items: list[Any], born_host: tuple[str, int], store_host: tuple[str, int]) -> list[Any]:
        """Put each item (a `SendRow`, or a `MessageExtBrokerInner`) as `put_message_group` would, in order; the rows'
        hosts are `born_host` and `store_host` (a group's sends share their connection and broker). Results in the
        order of `items`: `(msg_id, queue_offset, size)` for a row stored in the one pass, else the item's
        `PutMessageResult` (its row, if it was one, replaced in `items` by the message put). See `put_now`."""
        results = self.put_now(items, born_host, store_host)
        if results.__class__ is not list:
            results = await results
        return results  # type: ignore[no-any-return]

    def put_now(
        self, items: list[Any], born_host: tuple[str, int], store_host: tuple[str, int], in_a_row: bool = True
    ) -> list[Any] | Awaitable[list[Any]]:
        """`put` on the caller's stack: its results when every item was a row stored in the one pass and the put's
        last steps needed no wait (the common group under ASYNC_FLUSH), else an awaitable of them (the general way
        for the items from the first the pass did not take, a wait for the reput, the every-64th yield), which has
        done what `put` had done by then. Why: the send processor's synchronous group entry answers a read's sends
        without a coroutine when the store needed none. `in_a_row`: as `put_one_now`'s."""
        putter = self.putter
        cl = self.commit_log
        d = self.dispatcher
        reput = self.reput
        mf = cl.mapped_file_queue.last_mapped_file()
        if not self._open(cl, mf):
            return self._general(items, 0, [], born_host, store_host)
        begin = store_ts = putter.now_ms()
        cl.begin_time_in_lock = begin
        results: list[Any] = []
        pos = start = mf.wrote_position
        last_end = mf.file_size - END_FILE_MIN_BLANK_LENGTH  # a record must end by here (room for a BLANK after it)
        # a record past `limit` is looked at again: past the file's room, or staged (4 KiB or more past the pre-fault
        # window)
        limit = min(last_end, mf.prefaulted_position)
        base = mf.file_from_offset
        view = mf.write_view
        table = cl.topic_queue_table
        encoder = cl.encoder
        heads = encoder.topic_heads
        topics_ok = putter._topics_ok
        max_body = putter.config.max_message_size
        queues_of = d.consume_queue_table
        index = d._index_enabled
        index_keys, index_phys = d._index_keys, d._index_phys
        records = self._records
        # the record's born host, store time and store host: one field, the same for every row here
        hosts = self._hosts
        if hosts[0] is not born_host or hosts[1] is not store_host:
            hosts = self._host_parts(born_host, store_host)
        _, _, born_ip, born_port, store_ip, store_port, id_base = hosts
        mid = _MID.pack(born_ip, born_port, store_ts, store_ip, store_port)
        last_topic = None
        topics_seen: dict[str, tuple] = {}  # topic → (its head, fixed size, key prefix, queues written: id → state)
        # the current topic's queues written: queue id → (its last file, the file's view, its last entry's position,
        # the queue, its key)
        seen: dict[int, tuple] = {}
        head = key_prefix = ""
        fixed = 0
        rec: Any = None
        rec_body = rec_props = -1
        entry = _ENTRY.pack_into
        complete = False  # (False after an exception: the records before the one that raised stay, announced)
        try:
            for row in items:
                try:  # (a message, not a row, does not unpack: it and the rest go the general way)
                    topic, queue_id, body, props, text, tags_code, flag, sys_flag, born_ts, reconsume = row
                except (TypeError, ValueError):
                    break
                # the general path's plan (`put_message_group`) for what the processor did not vouch for (`SendRow`)
                if (body_length := len(body)) > max_body:
                    break
                props_bytes = text.encode()
                if (props_length := len(props_bytes)) > MAX_PROPERTIES_LENGTH:
                    break
                if topic != last_topic:
                    # another topic than the previous row's: its state if this loop saw it, else its checks
                    state = topics_seen.get(topic)
                    if state is None:
                        # its topic checked and encoded before (the putter's), its queues
                        if (head := heads.get(topic)) is None or topic not in topics_ok or topic not in queues_of:
                            break
                        state = topics_seen[topic] = (head, FIXED_PART_LENGTH + len(head) + 2, f"{topic}#", {})
                    head, fixed, key_prefix, seen = state
                    last_topic = topic
                    rec_body = -1  # (the record's Struct has the topic's length)
                qs = seen.get(queue_id)
                if qs is None:
                    # a queue this loop has not written: its consume queue and next entry (`ConsumeQueue.try_append`'s
                    # rule); then its next offset and entry follow from what the loop wrote
                    if (cq := queues_of[topic].get(queue_id)) is None:
                        break  # a queue's first entry: created by the general path's dispatch
                    cq_files = cq.mapped_file_queue.mapped_files
                    if not cq_files:
                        break
                    cq_mf = cq_files[-1]
                    key = (topic, queue_id)
                    cq_pos = cq_mf.wrote_position
                    if (
                        cq_pos == 0
                        or cq_mf.file_from_offset + cq_pos != table.get(key, 0) * _CQ_UNIT
                        or base + pos < cq.max_physic_offset  # (an entry not after the last: the general path's)
                    ):
                        break
                    qs = seen[queue_id] = (cq_mf, cq_mf.write_view, cq_mf.file_size - _CQ_UNIT, cq, key)
                cq_mf, cq_view, cq_last, cq, key = qs
                cq_pos = cq_mf.wrote_position
                if cq_pos > cq_last:
                    break  # the queue's next file: made by the general path (the reput, in a worker thread)
                queue_offset = table[key]
                size = fixed + body_length + props_length
                if (end := pos + size) > limit and (end > last_end or size >= OS_PAGE_SIZE):
                    break  # a BLANK and the next file, or a staged pwrite: the writer's and the general path's
                phy = base + pos
                # the record in one pack_into (the layout of `CommitLog._write_group`'s)
                if body_length != rec_body or props_length != rec_props:  # (one Struct for a run of one shape)
                    rec = records.get((body_length, len(head), props_length)) or self._record(
                        body_length, len(head), props_length
                    )
                    rec_body, rec_props = body_length, props_length
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
                    sys_flag,
                    born_ts,
                    mid,
                    reconsume,
                    body_length,
                    body,
                    head,
                    props_length,
                    props_bytes,
                )
                table[key] = queue_offset + 1
                entry(cq_view, cq_pos, phy, size, tags_code)
                cq_mf.wrote_position = cq_mf.committed_position = cq_pos + _CQ_UNIT
                pos = end
                cq.max_physic_offset = base + end
                if index:
                    uniq = props.get(_UNIQ_KEY)
                    if _KEYS in props:  # (index_keys inlined for at most one key each)
                        keys = props[_KEYS]
                        if _KEY_SEPARATOR in keys:
                            d._queue_index_keys(topic, uniq, keys, phy, store_ts)
                        else:
                            if uniq:
                                index_keys.append(key_prefix + uniq)
                                index_phys.append(phy)
                            if keys:
                                index_keys.append(key_prefix + keys)
                                index_phys.append(phy)
                    elif uniq:  # (their store times, all `store_ts`, are added for the group after the loop)
                        index_keys.append(key_prefix + uniq)
                        index_phys.append(phy)
                results.append(("%032X" % (id_base | phy), queue_offset, size))  # (the offset id: host, port, offset)
            complete = True
        finally:
            index_times = d._index_times
            if len(index_times) < len(index_keys):  # (one store time a key queued above)
                index_times.extend(repeat(store_ts, len(index_keys) - len(index_times)))
            stored = len(results)
            if not complete:
                pos = start + sum([r[2] for r in results])
            end = base + pos
            if stored:
                # (readable before its arrival is announced, below)
                mf.wrote_position = pos
                mf.store_timestamp = store_ts
                pf = cl.prefault
                if pf is not None and end >= pf.wake_offset:
                    pf.wakeup()
                cl.put_message_times_total += stored
                cl.put_message_size_total += pos - start
                if d.checkpoint is not None:
                    d.checkpoint.logics_msg_timestamp = store_ts
                reput.reput_from_offset = end
                reput.dispatched_total += stored
            cl.begin_time_in_lock = 0
            if stored and d._listening:
                d.announce_rows(items, results, store_ts, topics_seen)
        cl._account(begin)
        if stored < len(items):  # the rest, appended before anything here awaits (the records stay in order)
            return self._general(items, stored, results, born_host, store_host, begin if stored else None, end)
        if not stored:
            return results
        # (`_after` of the stored records, on this stack unless it waits or yields)
        wait = d.after_inline_put()
        if in_a_row:
            if wait or putter._inline_appends + stored >= _YIELD_EVERY_INLINE:
                return self._after_rows(results, begin, end, wait)
            putter._inline_appends += stored
        elif wait:
            return self._after_rows(results, begin, end, wait, False)
        putter._after_put(_NO_RESULT, None, "")
        putter.stats.put_done_many(stored, putter.now_ms() - begin)
        return results

    async def put_one(self, items: list[Any], born_host: tuple[str, int], store_host: tuple[str, int]) -> list[Any]:
        """`put` of a group of one `SendRow` (a lone send: one a read, the common case when few sends are in flight):
        the same record, entry, index keys, notice and result, straight-line (no loop, no per-topic or per-queue
        tables, no Struct run); where `put`'s loop would stop at its first row, the row goes the general way
        (`tests/store/test_store_send_rows.py` pins both against `put`). See `put_one_now`."""
        results = self.put_one_now(items, born_host, store_host)
        if results.__class__ is not list:
            results = await results
        return results  # type: ignore[no-any-return]

    def put_one_now(
        self, items: list[Any], born_host: tuple[str, int], store_host: tuple[str, int], in_a_row: bool = True
    ) -> list[Any] | Awaitable[list[Any]]:
        """`put_one` on the caller's stack: its results when the row was stored and its put's last steps needed no
        wait (the common case under ASYNC_FLUSH), else an awaitable of them (the general way, a wait for the reput,
        the every-64th yield), which has done what `put_one` had done by then. Why: the send processor's synchronous
        entry answers a lone send without a coroutine when the store needed none.

        `in_a_row` False: the caller returns to the event loop after this put (a read's callback), so the put is not
        one of "appends on the caller's stack in a row" and neither counts towards nor takes the every-64th yield
        (which made every 64th lone send a task answered a loop turn later)."""
        cl = self.commit_log
        mf = cl.mapped_file_queue.last_mapped_file()
        if not self._open(cl, mf):
            return self._general(items, 0, [], born_host, store_host)
        topic, queue_id, body, props, text, tags_code, flag, sys_flag, born_ts, reconsume = items[0]
        putter = self.putter
        d = self.dispatcher
        props_bytes = text.encode()
        head = cl.encoder.topic_heads.get(topic)
        queues = d.consume_queue_table.get(topic)
        cq = None if queues is None else queues.get(queue_id)
        # (put's checks of its first row, in one test: the sizes, the topic checked before, the queue's next entry
        # after its last in its current file, room for the record without a BLANK or a staged pwrite)
        if (
            cq is None
            or head is None
            or (body_length := len(body)) > putter.config.max_message_size
            or (props_length := len(props_bytes)) > MAX_PROPERTIES_LENGTH
            or topic not in putter._topics_ok
            or not (cq_files := cq.mapped_file_queue.mapped_files)
        ):
            return self._general(items, 0, [], born_host, store_host)
        cq_mf = cq_files[-1]
        cq_pos = cq_mf.wrote_position
        key = (topic, queue_id)
        table = cl.topic_queue_table
        pos = mf.wrote_position
        base = mf.file_from_offset
        phy = base + pos
        size = FIXED_PART_LENGTH + len(head) + 2 + body_length + props_length
        end = pos + size
        if (
            cq_pos == 0
            or cq_pos > cq_mf.file_size - _CQ_UNIT
            or cq_mf.file_from_offset + cq_pos != table.get(key, 0) * _CQ_UNIT
            or phy < cq.max_physic_offset
            or end > mf.file_size - END_FILE_MIN_BLANK_LENGTH
            or (end > mf.prefaulted_position and size >= OS_PAGE_SIZE)
        ):
            return self._general(items, 0, [], born_host, store_host)
        begin = store_ts = putter.now_ms()
        cl.begin_time_in_lock = begin
        hosts = self._hosts
        if hosts[0] is not born_host or hosts[1] is not store_host:
            hosts = self._host_parts(born_host, store_host)
        _, _, born_ip, born_port, store_ip, store_port, id_base = hosts
        try:
            queue_offset = table[key]
            (
                self._records.get((body_length, len(head), props_length))
                or self._record(body_length, len(head), props_length)
            ).pack_into(
                mf.write_view,
                pos,
                size,
                MESSAGE_MAGIC_CODE,
                crc32(body) & 0x7FFFFFFF,
                queue_id,
                flag,
                queue_offset,
                phy,
                sys_flag,
                born_ts,
                _MID.pack(born_ip, born_port, store_ts, store_ip, store_port),
                reconsume,
                body_length,
                body,
                head,
                props_length,
                props_bytes,
            )
            table[key] = queue_offset + 1
            _ENTRY.pack_into(cq_mf.write_view, cq_pos, phy, size, tags_code)
            cq_mf.wrote_position = cq_mf.committed_position = cq_pos + _CQ_UNIT
            cq.max_physic_offset = base + end
            if d._index_enabled:  # (as put's loop)
                uniq = props.get(_UNIQ_KEY)
                keys = props.get(_KEYS)
                if keys is not None and _KEY_SEPARATOR in keys:
                    d._queue_index_keys(topic, uniq, keys, phy, store_ts)
                else:  # (each key with its offset and store time, as `_queue_index_keys` queues them)
                    if uniq:
                        d._index_keys.append(f"{topic}#{uniq}")
                        d._index_phys.append(phy)
                        d._index_times.append(store_ts)
                    if keys:
                        d._index_keys.append(f"{topic}#{keys}")
                        d._index_phys.append(phy)
                        d._index_times.append(store_ts)
            results = [("%032X" % (id_base | phy), queue_offset, size)]
        except BaseException:  # (a bug's path: nothing of the row counts as stored, the section closes)
            cl.begin_time_in_lock = 0
            raise
        cl.begin_time_in_lock = 0
        # (readable before its arrival is announced, below)
        mf.wrote_position = end
        mf.store_timestamp = store_ts
        end += base
        pf = cl.prefault
        if pf is not None and end >= pf.wake_offset:
            pf.wakeup()
        cl.put_message_times_total += 1
        cl.put_message_size_total += size
        if d.checkpoint is not None:
            d.checkpoint.logics_msg_timestamp = store_ts
        reput = self.reput
        reput.reput_from_offset = end
        reput.dispatched_total += 1
        if d._listening:
            d.announce_rows(items, results, store_ts, (topic,))
        cl._account(begin)
        # (`_after` of the one record, on this stack unless it waits or yields)
        wait = d.after_inline_put()
        putter = self.putter
        if in_a_row:
            if wait or putter._inline_appends >= _YIELD_EVERY_INLINE - 1:
                return self._after_rows(results, begin, end, wait)
            putter._inline_appends += 1
        elif wait:
            return self._after_rows(results, begin, end, wait, False)
        putter._after_put(_NO_RESULT, None, "")
        putter.stats.put_done_many(1, putter.now_ms() - begin)
        return results

    async def _after_rows(
        self, results: list[Any], begin: int, end: int, wait: bool, in_a_row: bool = True
    ) -> list[Any]:
        """The rest of `put_now`'s or `put_one_now`'s records (every result one of the pass): `_after` (the dispatcher
        asked already: `wait`), then their results."""
        await self._after(len(results), begin, end, wait, in_a_row)
        return results

    async def _general(
        self,
        items: list[Any],
        start: int,
        results: list[Any],
        born_host: tuple[str, int],
        store_host: tuple[str, int],
        begin: int | None = None,
        end: int = 0,
    ) -> list[Any]:
        """Items start.. through `put_message_group`, each row made the message it describes (written back into
        `items`). `begin`: the one pass stored items ..start, up to CommitLog offset `end`; their put's last steps
        come after the rest's append, which runs before anything awaits (the group's records stay back to back)."""
        rest = items[start:]
        for k, item in enumerate(rest):
            if item.__class__ is tuple:
                rest[k] = items[start + k] = row_message(item, born_host, store_host)
        results.extend(await self.putter.put_message_group(rest))
        if begin is not None:
            await self._after(start, begin, end)
        return results

    async def _after(self, stored: int, begin: int, end: int, wait: bool | None = None, in_a_row: bool = True) -> None:
        """`put_message_group`'s last steps for the `stored` records of the one pass, ending at CommitLog `end`.
        `wait`: the dispatcher's `after_inline_put` answer when the caller asked it already; `in_a_row`: see
        `put_one_now`."""
        if not stored:
            return
        putter = self.putter
        if self.dispatcher.after_inline_put() if wait is None else wait:
            await self.reput.wait_dispatched(end)
        if in_a_row:
            putter._inline_appends += stored
            if putter._inline_appends >= _YIELD_EVERY_INLINE:
                putter._inline_appends = 0
                await asyncio.sleep(0)
        # (ASYNC_FLUSH only: wakes the flush or commit service, reads nothing of the result)
        putter._after_put(_NO_RESULT, None, "")
        putter.stats.put_done_many(stored, putter.now_ms() - begin)
