"""ScheduleMessageService: delivers delayed messages from ``SCHEDULE_TOPIC_XXXX`` when they fall due.

The store parks a message with ``DELAY=n`` (n > 0, not a prepared transaction) in the schedule topic's
queue n−1 with its real topic and queue in ``REAL_TOPIC``/``REAL_QID`` (upstream does that rewrite in
the CommitLog too). Within a level every message waits the same time, so a level's queue falls due in
arrival order: one coroutine per level looks at its head entry, sleeps until it is due (woken early
when a message arrives in an empty level), and stores it again in its real topic with ``DELAY``
cleared and the tag hash of its own TAGS.

Progress per level is ``config/delayOffset.json`` (``{"offsetTable":{level:offset}}``, upstream's
file). It is written after every round that delivered something, by one writer off the event loop,
and on shutdown after the last round has finished (a stop never interrupts a delivery half way), so
a clean restart neither loses nor repeats a delivery; a crash repeats at most the rounds whose
progress was not yet written (at-least-once, like upstream, which writes every 10 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.config_file import dumps, read_config, write_atomically
from broker.message_const import MessageConst
from broker.topic import SCHEDULE_TOPIC
from store.message import MessageExt, MessageExtBrokerInner, decode_record, encode_properties, tags_hash
from store.results import GetMessageStatus, PutMessageStatus

log = structlog.get_logger(__name__)

IDLE_POLL_S = 1.0
RETRY_AFTER_FAILURE_S = 0.1
STOP_GRACE_S = 5.0


@dataclass(slots=True)
class DeliveryStats:
    delivered: int = 0
    # how late deliveries were against their due time (store time + level delay), for runtime info/tests
    last_lateness_ms: int = 0
    max_lateness_ms: int = 0


class ScheduleMessageService:
    def __init__(self, *, store, delay_levels_ms: list[int], store_path_root_dir: str,
                 now_ms: Callable[[], int]) -> None:
        self.store = store
        self.levels_ms = list(delay_levels_ms)
        self.max_level = len(self.levels_ms)
        self._now_ms = now_ms
        self._path = Path(store_path_root_dir) / "config" / "delayOffset.json"
        self.offset_table: dict[int, int] = {}
        self.stats = DeliveryStats()
        self._wakeups: dict[int, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._persist_wanted: asyncio.Event | None = None
        self._persister: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def delivered(self) -> int:
        return self.stats.delivered

    # The store itself moves a ``DELAY`` message into the schedule topic (upstream CommitLog.putMessage);
    # this service only delivers what falls due.
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
        write_atomically(self._path, self._snapshot())

    def _snapshot(self) -> bytes:
        return dumps({"offsetTable": {str(k): v for k, v in sorted(self.offset_table.items())}})

    def correct_delay_offsets(self) -> None:
        """Upstream correctDelayOffset: a stored offset outside its queue's range (files removed or
        lost) is moved to the nearest end, so a level neither stalls nor replays a deleted range."""
        for level, offset in list(self.offset_table.items()):
            if not 1 <= level <= self.max_level:
                continue
            queue_id = level - 1
            min_offset = self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id)
            max_offset = self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, queue_id)
            corrected = min(max(offset, min_offset), max_offset)
            if corrected != offset:
                log.warning("delay offset corrected", level=level, offset=offset, corrected=corrected,
                            min_offset=min_offset, max_offset=max_offset)
                self.offset_table[level] = corrected

    def start(self) -> None:
        self._stopping = False
        self.correct_delay_offsets()
        loop = asyncio.get_running_loop()
        self._persist_wanted = asyncio.Event()
        self._persister = loop.create_task(self._persist_loop(), name="schedule-persist")
        for level in range(1, self.max_level + 1):
            self._wakeups[level] = asyncio.Event()
            self._tasks.append(loop.create_task(self._deliver_level(level), name=f"schedule-level-{level}"))

    async def stop(self) -> None:
        """Let every level finish the delivery in hand, then write the progress."""
        self._stopping = True
        for event in self._wakeups.values():
            event.set()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=STOP_GRACE_S)
            for task in pending:
                log.warning("schedule level did not stop in time, cancelled", task=task.get_name())
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._persister is not None:
            # Not cancelled: a write in its worker thread would go on and race the final one.
            assert self._persist_wanted is not None
            self._persist_wanted.set()
            await asyncio.gather(self._persister, return_exceptions=True)
            self._persister = None
        self.persist()

    async def _persist_loop(self) -> None:
        assert self._persist_wanted is not None
        while True:
            await self._persist_wanted.wait()
            self._persist_wanted.clear()
            if self._stopping:
                return  # stop() writes the final state itself
            try:
                await asyncio.to_thread(write_atomically, self._path, self._snapshot())
            except OSError as exc:
                log.error("cannot write delayOffset.json", error=str(exc))
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)
                self._persist_wanted.set()

    # -- delivery ----------------------------------------------------------------------------
    async def _deliver_level(self, level: int) -> None:
        event = self._wakeups[level]
        while not self._stopping:
            # Clear before looking, so an arrival during the look is not lost.
            event.clear()
            try:
                wait_s = await self._deliver_due(level)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not stop the level
                log.exception("schedule delivery failed", level=level)
                wait_s = RETRY_AFTER_FAILURE_S
            if self._stopping:
                break
            try:
                await asyncio.wait_for(event.wait(), wait_s)
            except TimeoutError:
                pass

    async def _deliver_due(self, level: int) -> float:
        """Deliver every due message of a level; returns how long to sleep before the next look."""
        queue_id = level - 1
        delay_ms = self.levels_ms[queue_id]
        offset = self.offset_table.get(level, 0)
        delivered = 0
        try:
            while not self._stopping:
                min_offset = self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id)
                offset = max(offset, min_offset)
                if offset >= self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, queue_id):
                    return IDLE_POLL_S
                store_ts = self.store.get_message_store_timestamp(SCHEDULE_TOPIC, queue_id, offset)
                now = self._now_ms()
                if store_ts > 0 and store_ts + delay_ms > now:
                    return min((store_ts + delay_ms - now) / 1000, IDLE_POLL_S)
                result = self.store.get_message("", SCHEDULE_TOPIC, queue_id, offset, 1, None)
                if result.status != GetMessageStatus.FOUND or not result.buffers:
                    # a hole or an unreadable entry: skip it rather than stall the level forever
                    log.warning("schedule entry unreadable, skipped", level=level, offset=offset,
                                status=result.status.name)
                    offset = max(offset + 1, result.next_begin_offset)
                    continue
                msg = decode_record(result.buffers[0])
                due = msg.store_timestamp + delay_ms
                if due > now:  # the store timestamp could not be read cheaply above
                    return min((due - now) / 1000, IDLE_POLL_S)
                put = await self.store.put_message(self.restore(msg))
                if put.status != PutMessageStatus.PUT_OK:
                    log.warning("schedule delivery put failed, will retry", level=level, offset=offset,
                                status=put.status.name)
                    return RETRY_AFTER_FAILURE_S
                offset += 1
                delivered += 1
                self.offset_table[level] = offset
                lateness = max(0, now - due)
                self.stats.delivered += 1
                self.stats.last_lateness_ms = lateness
                self.stats.max_lateness_ms = max(self.stats.max_lateness_ms, lateness)
            return 0.0
        finally:
            if delivered:
                self.offset_table[level] = offset
                if self._persist_wanted is not None:
                    self._persist_wanted.set()

    @staticmethod
    def restore(msg: MessageExt) -> MessageExtBrokerInner:
        """The message as it goes to its real topic and queue (upstream messageTimeup)."""
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

    def runtime_info(self) -> dict[str, str]:
        """Upstream's ``scheduleMessageOffset_<level>`` entries ("delivered,max") plus our lateness."""
        info: dict[str, str] = {}
        for level in range(1, self.max_level + 1):
            max_offset = self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            info[f"scheduleMessageOffset_{level}"] = f"{self.offset_table.get(level, 0)},{max_offset}"
        info["scheduleMessageMaxLatenessMs"] = str(self.stats.max_lateness_ms)
        return info
