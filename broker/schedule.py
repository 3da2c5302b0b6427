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
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.config_file import dumps, read_config, write_atomically
from broker.message_const import MessageConst
from broker.topic import SCHEDULE_TOPIC
from store.message import (
    POS_STORE_TIMESTAMP as _POS_STORE_TIMESTAMP,
    TRANSACTION_ROLLBACK_TYPE,
    MessageExt,
    MessageExtBrokerInner,
    decode_record,
    encode_properties,
    tags_hash,
)
from store.results import GetMessageStatus, PutMessageStatus

log = structlog.get_logger(__name__)

IDLE_POLL_S = 1.0
RETRY_AFTER_FAILURE_S = 0.1
STOP_GRACE_S = 5.0
# A round of one level: at most this many entries read, decoded and put before it yields. ~512 keeps a
# round to a few ms of the event loop while a level delivers tens of thousands per second.
BATCH_MAX_MESSAGES = 512
_LONG = struct.Struct(">q")
_TRANSACTION_BITS = TRANSACTION_ROLLBACK_TYPE  # both transaction bits: put_messages refuses such messages


def _wire_size(msg: MessageExtBrokerInner) -> int:
    """What the store's batch size check counts for a message (20 + body + 2 + properties bytes)."""
    return 22 + len(msg.body or b"") + 3 * len(msg.properties_string)


@dataclass(slots=True)
class DeliveryStats:
    delivered: int = 0
    # how late deliveries were against their due time (store time + level delay), for runtime info/tests
    last_lateness_ms: int = 0
    max_lateness_ms: int = 0


class ScheduleMessageService:
    def __init__(self, *, store, delay_levels_ms: list[int], store_path_root_dir: str,
                 now_ms: Callable[[], int], batch_max_messages: int = BATCH_MAX_MESSAGES) -> None:
        self.store = store
        self.batch_max_messages = max(1, batch_max_messages)
        # one append of a run must pass the store's batch checks (maxMessageSize, a fraction of a file)
        cfg = store.config
        self.batch_max_bytes = min(cfg.max_message_size, cfg.mapped_file_size_commit_log // 4)
        self.levels_ms = list(delay_levels_ms)
        self.max_level = len(self.levels_ms)
        self._now_ms = now_ms
        self._path = Path(store_path_root_dir) / "config" / "delayOffset.json"
        self.offset_table: dict[int, int] = {}
        self.stats = DeliveryStats()
        self._wakeups: dict[int, asyncio.Event] = {}
        # levels whose queue was found empty: only those need waking by an arrival (a level with
        # messages already sleeps until its head is due; waking it for each arrival of a burst would
        # cost a look per put)
        self._idle: set[int] = set()
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
        level = queue_id + 1
        if level in self._idle:
            self._idle.discard(level)
            event = self._wakeups.get(level)
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
        self._idle.clear()
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
        """Deliver the due messages of a level, a bounded batch per round, yielding between rounds;
        returns how long to sleep before the next look."""
        queue_id = level - 1
        offset = self.offset_table.get(level, 0)
        while not self._stopping:
            min_offset = self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id)
            if min_offset > offset:
                self._advance(level, min_offset)  # the head of the level was removed
                offset = min_offset
            if offset >= self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, queue_id):
                self._idle.add(level)
                return IDLE_POLL_S
            wait_s = await self._deliver_batch(level, offset)
            if wait_s is not None:
                return wait_s
            offset = self.offset_table[level]
            # a burst is many batches: let sends, pulls and the other levels run between them
            await asyncio.sleep(0)
        return 0.0

    async def _deliver_batch(self, level: int, offset: int) -> float | None:
        """One round: the due prefix of at most `batch_max_messages` consume-queue entries from `offset`,
        put to their real queues in runs; None when it made progress (look again at once)."""
        queue_id = level - 1
        delay_ms = self.levels_ms[queue_id]
        cq = self.store.find_consume_queue(SCHEDULE_TOPIC, queue_id)
        entries = cq.get_entries(offset, self.batch_max_messages)
        if entries is None or len(entries) == 0:
            return self._skip_hole(level, offset)
        now = self._now_ms()
        phys = entries["offset"].tolist()
        sizes = entries["size"].tolist()
        read = self.store.commit_log.get_message
        restored: list[MessageExtBrokerInner | None] = []
        dues: list[int] = []
        # Due = store time + this level's delay, read from each record (the entry's tags code holds the
        # store's own computation, which need not use the same level table); the level's queue falls
        # due in arrival order, so the round stops at the first entry not yet due.
        for phy, size in zip(phys, sizes):
            view = read(phy, size)
            if view is None or size < _POS_STORE_TIMESTAMP + 8:
                restored.append(None)
                dues.append(now)
                continue
            due = _LONG.unpack_from(view, _POS_STORE_TIMESTAMP)[0] + delay_ms
            if due > now:
                if not restored:
                    return min((due - now) / 1000, IDLE_POLL_S)
                break
            try:
                restored.append(self.restore(decode_record(view)))
            except Exception as exc:  # a corrupt record must not stall the level
                log.warning("schedule entry undecodable, skipped", level=level, error=str(exc))
                restored.append(None)
            dues.append(due)
        done = 0
        for start, stop in self._runs(restored):
            first = restored[start]
            if first is None:
                log.warning("schedule entry unreadable, skipped", level=level, offset=offset + start,
                            count=stop - start)
                self._advance(level, offset + stop)
                done = stop
                continue
            run = restored[start:stop]
            if len(run) == 1:
                put = await self.store.put_message(first)
            else:
                put = await self.store.put_messages(run)  # type: ignore[arg-type]
            if put.status != PutMessageStatus.PUT_OK:
                log.warning("schedule delivery put failed, will retry", level=level, offset=offset + start,
                            count=stop - start, status=put.status.name)
                return RETRY_AFTER_FAILURE_S if done == 0 else None
            # progress only after the put: a crash before this line repeats the run, never loses it
            self._advance(level, offset + stop)
            done = stop
            after = self._now_ms()
            stats = self.stats
            stats.delivered += stop - start
            lateness = max(0, after - dues[stop - 1])
            stats.last_lateness_ms = lateness
            stats.max_lateness_ms = max(stats.max_lateness_ms, max(0, after - dues[start]))
            if self._stopping:
                break
        return None

    def _runs(self, restored: list[MessageExtBrokerInner | None]) -> list[tuple[int, int]]:
        """[start, stop) spans to put in one append: consecutive messages of one real queue, not
        transactional (the batch put refuses those), within the store's batch size limit."""
        runs: list[tuple[int, int]] = []
        limit = self.batch_max_bytes
        start = 0
        n = len(restored)
        while start < n:
            first = restored[start]
            stop = start + 1
            if first is None:
                while stop < n and restored[stop] is None:
                    stop += 1
            elif not first.sys_flag & _TRANSACTION_BITS:
                key = (first.topic, first.queue_id)
                size = _wire_size(first)
                while stop < n:
                    m = restored[stop]
                    if m is None or m.sys_flag & _TRANSACTION_BITS or (m.topic, m.queue_id) != key:
                        break
                    size += _wire_size(m)
                    if size > limit:
                        break
                    stop += 1
            runs.append((start, stop))
            start = stop
        return runs

    def _advance(self, level: int, offset: int) -> None:
        self.offset_table[level] = offset
        if self._persist_wanted is not None:
            self._persist_wanted.set()

    def _skip_hole(self, level: int, offset: int) -> float | None:
        """No readable entry at `offset` below the queue's max (a removed or damaged file): jump to where
        reading can go on, rather than stall the level forever."""
        result = self.store.get_message("", SCHEDULE_TOPIC, level - 1, offset, 1, None)
        if result.status == GetMessageStatus.FOUND:
            return 0.0  # readable now (an entry written between the two looks): look again
        nxt = max(offset + 1, result.next_begin_offset)
        log.warning("schedule entry unreadable, skipped", level=level, offset=offset, next_offset=nxt,
                    status=result.status.name)
        self._advance(level, nxt)
        return None

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
