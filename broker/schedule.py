"""ScheduleMessageService: delay levels through ``SCHEDULE_TOPIC_XXXX``, as upstream.

A message with ``DELAY=n`` (n > 0, not a prepared transaction) is stored in the schedule topic's
queue n−1 with its real topic and queue in ``REAL_TOPIC``/``REAL_QID``; its consume-queue tag code is
the delivery timestamp. One coroutine per level walks its queue in order (a level's messages fall due
in arrival order) and, at each due time, stores the message again in its real topic with ``DELAY``
cleared. Progress per level is persisted in ``config/delayOffset.json`` after every delivery round
and at shutdown, so a clean restart neither loses nor repeats deliveries; a crash can repeat at most
the round in flight (at-least-once, like upstream).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

import structlog

from broker.config_file import dumps, read_config, write_atomically
from broker.message_const import MessageConst
from broker.topic import SCHEDULE_TOPIC
from store.message import (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE, MessageExtBrokerInner,
                           decode_record, encode_properties, tags_hash)
from store.results import GetMessageStatus, PutMessageStatus

log = structlog.get_logger(__name__)

IDLE_POLL_S = 1.0
RETRY_AFTER_FAILURE_S = 0.1


class ScheduleMessageService:
    def __init__(self, *, store, delay_levels_ms: list[int], store_path_root_dir: str,
                 now_ms: Callable[[], int]) -> None:
        self.store = store
        self.levels_ms = delay_levels_ms
        self.max_level = len(delay_levels_ms)
        self._now_ms = now_ms
        self._path = Path(store_path_root_dir) / "config" / "delayOffset.json"
        self.offset_table: dict[int, int] = {}
        self._wakeups: dict[int, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.delivered = 0

    # -- put path ----------------------------------------------------------------------------
    def maybe_delay(self, msg: MessageExtBrokerInner) -> MessageExtBrokerInner:
        """Redirect a delayed message to the schedule topic (in place); other messages pass through."""
        raw = msg.properties.get(MessageConst.DELAY)
        if not raw:
            return msg
        tx = msg.sys_flag & TRANSACTION_ROLLBACK_TYPE
        if tx not in (0, TRANSACTION_COMMIT_TYPE):  # prepared or rollback: delayed only after commit
            return msg
        try:
            level = int(raw)
        except ValueError:
            return msg
        if level <= 0:
            return msg
        level = min(level, self.max_level)
        props = msg.properties
        props[MessageConst.DELAY] = str(level)
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QID] = str(msg.queue_id)
        msg.properties_string = encode_properties(props)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1
        # The tag code of a schedule entry is its delivery time (upstream computes it at dispatch).
        msg.tags_code = self._now_ms() + self.levels_ms[level - 1]
        return msg

    def on_message_arriving(self, queue_id: int) -> None:
        event = self._wakeups.get(queue_id + 1)
        if event is not None:
            event.set()

    # -- lifecycle ---------------------------------------------------------------------------
    def load(self) -> None:
        data = read_config(self._path)
        if data:
            self.offset_table = {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}

    def persist(self) -> None:
        write_atomically(self._path, dumps({"offsetTable": {str(k): v for k, v in sorted(self.offset_table.items())}}))

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for level in range(1, self.max_level + 1):
            self._wakeups[level] = asyncio.Event()
            self._tasks.append(loop.create_task(self._deliver_level(level), name=f"schedule-level-{level}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self.persist()

    # -- delivery ----------------------------------------------------------------------------
    async def _deliver_level(self, level: int) -> None:
        queue_id = level - 1
        delay_ms = self.levels_ms[level - 1]
        event = self._wakeups[level]
        while True:
            try:
                wait_s = await self._deliver_due(level, queue_id, delay_ms)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one bad round must not stop the level
                log.exception("schedule delivery failed", level=level)
                wait_s = RETRY_AFTER_FAILURE_S
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), wait_s)
            except TimeoutError:
                pass

    async def _deliver_due(self, level: int, queue_id: int, delay_ms: int) -> float:
        """Deliver every due message of a level; returns how long to sleep before the next look."""
        offset = self.offset_table.get(level, 0)
        delivered_any = False
        try:
            while True:
                min_offset = self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id)
                if offset < min_offset:
                    offset = min_offset
                if offset >= self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, queue_id):
                    return IDLE_POLL_S
                result = self.store.get_message("", SCHEDULE_TOPIC, queue_id, offset, 1, None)
                if result.status != GetMessageStatus.FOUND or not result.buffers:
                    # a hole or an unreadable entry: skip it rather than stall the level forever
                    log.warning("schedule entry unreadable, skipped", level=level, offset=offset,
                                status=result.status.name)
                    offset = max(offset + 1, result.next_begin_offset)
                    continue
                msg = decode_record(result.buffers[0])
                due = msg.store_timestamp + delay_ms
                now = self._now_ms()
                if due > now:
                    return min((due - now) / 1000, IDLE_POLL_S)
                inner = self._restore(msg)
                put = await self.store.put_message(inner)
                if put.status != PutMessageStatus.PUT_OK:
                    log.warning("schedule delivery put failed, will retry", level=level, offset=offset,
                                status=put.status.name)
                    return RETRY_AFTER_FAILURE_S
                offset += 1
                self.delivered += 1
                delivered_any = True
                self.offset_table[level] = offset
        finally:
            if delivered_any:
                self.offset_table[level] = offset
                self.persist()

    @staticmethod
    def _restore(msg) -> MessageExtBrokerInner:
        props = dict(msg.properties)
        props.pop(MessageConst.DELAY, None)
        topic = props.get(MessageConst.REAL_TOPIC, msg.topic)
        try:
            queue_id = int(props.get(MessageConst.REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        tags = props.get(MessageConst.TAGS)
        return MessageExtBrokerInner(
            topic=topic, queue_id=queue_id, flag=msg.flag, body=msg.body, properties=props,
            properties_string=encode_properties(props), tags_code=tags_hash(tags) if tags else 0,
            sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
            store_host=msg.store_host, reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset)

