"""ScheduleMessageService: delivers delayed messages from ``SCHEDULE_TOPIC_XXXX`` when they fall due.

The store parks a message with ``DELAY=n`` (n > 0, not a prepared transaction) in the schedule topic's
queue n−1 with its real topic and queue in ``REAL_TOPIC``/``REAL_QID`` (upstream does that rewrite in
the CommitLog too). Within a level every message waits the same time, so a level's queue falls due in
arrival order: one coroutine per level looks at its head entry, sleeps until it is due (woken early
when a message arrives in an empty level), and stores it again in its real topic with ``DELAY``
cleared and the tag hash of its own TAGS.

A burst falls due at the rate it arrived, so a level delivers in rounds: one read of up to
``batch_max_messages`` consume-queue entries, the due prefix decoded and put back with one
``put_messages`` append per real queue (its messages in level order; order across queues is not
something a consumer can see), then a yield to the event loop before the next round (5.x made this
asynchronous and batched too; 4.9 put one message per timer tick). Transactional messages, which the
batch put refuses, go one by one.

Progress per level is ``config/delayOffset.json`` (``{"offsetTable":{level:offset}}``, upstream's
file). A level's offset moves only after the put of the messages before it returned, so a crash never
loses a delivery. It is written after every round that delivered something, by one writer off the
event loop, and on shutdown after the last round has finished (a stop never interrupts a delivery half
way). So that a crash does not repeat the runs put after the last write either, the file also holds
``commitLogOffset``: a CommitLog position below which no delivery the offsets do not count was
written. On start, the records from there to the end (a short stretch: the file is written after each
round, and, once that stretch passes half of ``RECOVERY_SCAN_LIMIT``, every ``STALE_CHECK_S`` and from a
state taken before a put, written without the put waiting for it; a put that would pass the whole limit
waits for that write, so deliveries never lie further than the limit past a written position) are matched
against each level's next entries, and the offsets move past the ones already delivered (upstream repeats them:
at-least-once). A put that fails after others of its round succeeded is handled the same way: the offset
stops before it, the entries delivered beyond are skipped when the round is retried.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import structlog

from broker.config_file import dumps, read_config, write_atomically, write_if_changed
from broker.inner_message import inner_from
from broker.message_const import MessageConst
from broker.parked_record import ParkedRecordReader
from broker.topic import SCHEDULE_TOPIC
from store.message import (
    POS_STORE_TIMESTAMP as _POS_STORE_TIMESTAMP,
)
from store.message import (
    TRANSACTION_ROLLBACK_TYPE,
    MessageExt,
    MessageExtBrokerInner,
    decode_record,
)
from store.results import GetMessageStatus, PutMessageStatus

log = structlog.get_logger(__name__)

IDLE_POLL_S = 1.0
RETRY_AFTER_FAILURE_S = 0.1
STOP_GRACE_S = 5.0
# A round of one level: at most this many entries read, decoded and put before it yields. ~512 keeps a
# round to a few ms of the event loop while a level delivers tens of thousands per second.
BATCH_MAX_MESSAGES = 512
# The bound on what a start after a crash reads to find unrecorded deliveries: a delivery is never put
# further than this past the ``commitLogOffset`` of a file already written. The file is written in the
# background once the CommitLog is half that far past it (a put does not wait), and a put that would pass
# the bound waits for that write (only when the CommitLog grew half the limit during one write).
RECOVERY_SCAN_LIMIT = 16 * 1024 * 1024
# How often the writer looks whether the CommitLog moved half that far without a delivery to write the file.
STALE_CHECK_S = 0.25
# A CommitLog record's size beyond its body, topic and properties (the fixed fields, IPv6 hosts): with the
# properties counted three bytes a character, an upper bound of what a delivery's put appends.
_RECORD_OVERHEAD = 128
_LONG = struct.Struct(">q")
_TRANSACTION_BITS = TRANSACTION_ROLLBACK_TYPE  # both transaction bits: put_messages refuses such messages


def _copy_key(topic: str, queue_id: int, msg: MessageExt, properties_string: str | None = None) -> tuple:
    return (
        topic,
        queue_id,
        msg.born_timestamp,
        msg.born_host,
        msg.body_crc,
        msg.flag,
        msg.properties_string if properties_string is None else properties_string,
    )


def _wire_size(msg: MessageExtBrokerInner) -> int:
    """What the store's batch size check counts for a message (20 + body + 2 + properties bytes)."""
    return 22 + len(msg.body or b"") + 3 * len(msg.properties_string)


def _record_size_bound(msg: MessageExtBrokerInner) -> int:
    """At least the CommitLog bytes ``msg``'s record takes."""
    return _RECORD_OVERHEAD + 3 * len(msg.topic) + len(msg.body or b"") + 3 * len(msg.properties_string)


def scan_delivered_copies(store, below: int, is_copy: Callable[[MessageExt], bool]) -> tuple[dict[tuple, int], int]:
    """The CommitLog records from `below` to its end that `is_copy` calls delivered copies, counted by
    ``_copy_key`` (what a restored parked entry is matched with after a crash), and how many records were read.
    Shared by the delay-level and the timer services."""
    end = store.commit_log.get_max_offset()
    copies: dict[tuple, int] = {}
    scanned = 0
    phy = below
    while phy < end:
        view = store.select_one_message_by_offset(phy)
        if view is None:  # the end-of-file filler (or a hole): go on in the next file
            phy = store.commit_log.roll_next_file(phy)
            continue
        try:
            msg = decode_record(view, read_body=False)
        except Exception:
            phy = store.commit_log.roll_next_file(phy)
            continue
        phy += msg.store_size
        scanned += 1
        if is_copy(msg):
            key = _copy_key(msg.topic, msg.queue_id, msg)
            copies[key] = copies.get(key, 0) + 1
    return copies, scanned


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Until `event` is set (True) or `timeout_s` passed (False). Not ``asyncio.wait_for(event.wait())``:
    on Python 3.11 that returns normally when the task is cancelled just as the event is set, and a
    cancelled level or writer loop would go on forever (a crash test's gather hung until its timeout)."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait((waiter,), timeout=timeout_s)
    finally:
        waiter.cancel()
    return bool(done)


@dataclass(slots=True)
class DeliveryStats:
    delivered: int = 0
    # how late deliveries were against their due time (store time + level delay), for runtime info/tests
    last_lateness_ms: int = 0
    max_lateness_ms: int = 0


class ScheduleMessageService:
    def __init__(
        self,
        *,
        store,
        delay_levels_ms: list[int],
        store_path_root_dir: str,
        now_ms: Callable[[], int],
        batch_max_messages: int = BATCH_MAX_MESSAGES,
    ) -> None:
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
        # per level with deliveries its offset does not count yet (a round in progress, or the entries a
        # failed put or a crash left delivered beyond the offset): the CommitLog end before the first
        # of them, and those entries (see ``_safe_commit_log_offset``)
        self._uncounted_from: dict[int, int] = {}
        self._ahead: dict[int, set[int]] = {}
        # ``commitLogOffset`` of the file on disk, and of the file loaded (None: absent, no recovery scan)
        self._persisted_below = 0
        self._loaded_below: int | None = None
        self._write_lock: asyncio.Lock | None = None
        self._snapshot_seq = 0
        self._written_seq = 0
        self._early_write: asyncio.Task[None] | None = None  # the write started ahead of a put
        self._reader = ParkedRecordReader()

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
            below = data.get("commitLogOffset")
            self._loaded_below = int(below) if isinstance(below, int) and below >= 0 else None

    def persist(self) -> None:
        payload, below, seq = self._snapshot()
        write_if_changed(self._path, payload)
        self._written_seq = seq
        self._persisted_below = below

    def _snapshot(self) -> tuple[bytes, int, int]:
        """The file's content now, its ``commitLogOffset`` and a number that orders snapshots. Taken on
        the event loop, between puts' awaits, so the offsets and the position agree."""
        below = self._safe_commit_log_offset()
        offsets = {str(k): v for k, v in sorted(self.offset_table.items())}
        self._snapshot_seq += 1
        return dumps({"offsetTable": offsets, "commitLogOffset": below}), below, self._snapshot_seq

    def _safe_commit_log_offset(self) -> int:
        """A CommitLog position below which every delivery put so far is counted in ``offset_table``:
        the end now, or the end as it was before the first put a level's offset does not count yet (a
        round in progress, or entries delivered beyond the offset)."""
        return min([self.store.commit_log.get_max_offset(), *self._uncounted_from.values()])

    async def _write(self, snapshot: tuple[bytes, int, int] | None = None) -> None:
        """One write of the file off the event loop, of `snapshot` or of the state once no other write
        runs; writes never overlap, and a snapshot older than the one last written is dropped (every
        snapshot is a consistent state, a newer one only says more)."""
        assert self._write_lock is not None
        async with self._write_lock:
            payload, below, seq = snapshot if snapshot is not None else self._snapshot()
            if seq < self._written_seq:
                return
            await asyncio.to_thread(write_atomically, self._path, payload)
            self._written_seq = seq
            self._persisted_below = below

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
                log.warning(
                    "delay offset corrected",
                    level=level,
                    offset=offset,
                    corrected=corrected,
                    min_offset=min_offset,
                    max_offset=max_offset,
                )
                self.offset_table[level] = corrected

    def start(self) -> None:
        self._stopping = False
        self._idle.clear()
        self._uncounted_from.clear()
        self._ahead.clear()
        self.correct_delay_offsets()
        if self._loaded_below is not None:
            self._skip_unrecorded_deliveries(self._loaded_below)
        # from here on the file always holds a commitLogOffset (a file without one: at-least-once once)
        self.persist()
        self._write_lock = asyncio.Lock()
        loop = asyncio.get_running_loop()
        self._persist_wanted = asyncio.Event()
        self._persister = loop.create_task(self._persist_loop(), name="schedule-persist")
        for level in range(1, self.max_level + 1):
            self._wakeups[level] = asyncio.Event()
            self._tasks.append(loop.create_task(self._deliver_level(level), name=f"schedule-level-{level}"))

    def _skip_unrecorded_deliveries(self, below: int) -> None:
        """After a crash: move each level's offset past the entries whose delivered copy is in the
        CommitLog from `below` on although the offsets written did not count it yet.

        A round puts one append per real queue, so those are a prefix of the level's entries from its
        offset and then, within one round's reach of the first entry not delivered, any subset: the
        offset moves past the prefix, the subset is remembered as delivered ahead. A copy is known by
        what ``restore`` makes of its entry (real topic and queue, born time and host, body CRC, the
        properties) and by its ``REAL_TOPIC`` property, which only such copies carry outside the
        schedule topic."""
        end = self.store.commit_log.get_max_offset()
        if below >= end:
            return
        copies, scanned = scan_delivered_copies(
            self.store, below, lambda m: m.topic != SCHEDULE_TOPIC and MessageConst.REAL_TOPIC in m.properties
        )
        unmatched = sum(copies.values())
        skipped: dict[int, int] = {}
        for level in range(1, self.max_level + 1):
            start = self.offset_table.get(level, 0)
            max_offset = self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            offset = start
            first_missing: int | None = None
            ahead: set[int] = set()
            while unmatched and offset < max_offset:
                if first_missing is not None and offset >= first_missing + self.batch_max_messages:
                    break
                result = self.store.get_message("", SCHEDULE_TOPIC, level - 1, offset, 1, None)
                if result.status != GetMessageStatus.FOUND or not result.buffers:
                    break
                try:
                    parked = decode_record(result.buffers[0])
                    inner = self.restore(parked)
                    key: tuple | None = _copy_key(inner.topic, inner.queue_id, parked, inner.properties_string)
                except Exception:  # what delivery skips is not delivered: a miss (the round skips it again)
                    key = None
                if key is not None and copies.get(key):
                    copies[key] -= 1
                    unmatched -= 1
                    if first_missing is not None:
                        ahead.add(offset)
                elif first_missing is None:
                    first_missing = offset
                offset += 1
            new_offset = offset if first_missing is None else first_missing
            if new_offset != start:
                self.offset_table[level] = new_offset
            if ahead:
                self._ahead[level] = ahead
                self._uncounted_from[level] = below
            if new_offset != start or ahead:
                skipped[level] = new_offset - start + len(ahead)
        log.info(
            "schedule recovery",
            commit_log_from=below,
            commit_log_to=end,
            records_scanned=scanned,
            delivered_not_recorded=skipped,
        )

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
        if self._early_write is not None:
            await asyncio.gather(self._early_write, return_exceptions=True)
            self._early_write = None
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
            if not await wait_event(self._persist_wanted, STALE_CHECK_S):
                # no delivery lately: still keep commitLogOffset near the end, or a start after a crash
                # would read everything written since the last delivery (and the next delivery would wait)
                if self.store.commit_log.get_max_offset() - self._persisted_below <= RECOVERY_SCAN_LIMIT // 2:
                    continue
            self._persist_wanted.clear()
            if self._stopping:
                return  # stop() writes the final state itself
            try:
                await self._write()
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
            await wait_event(event, wait_s)

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
        put to their real queues, one append per real queue (in level order within each); None when it
        made progress (look again at once)."""
        queue_id = level - 1
        delay_ms = self.levels_ms[queue_id]
        cq = self.store.find_consume_queue(SCHEDULE_TOPIC, queue_id)
        entries = cq.get_entries(offset, self.batch_max_messages)
        if entries is None or len(entries) == 0:
            return self._skip_hole(level, offset)
        now = self._now_ms()
        phys = entries["offset"].tolist()
        sizes = entries["size"].tolist()
        ahead = self._ahead.get(level, ())
        build = self._reader.inner
        get_data = self.store.commit_log.get_data
        restored: list[MessageExtBrokerInner | None] = []
        dues: list[int] = []
        # One view per CommitLog file the round reads (its readable part), sliced per entry, instead of
        # a file lookup per entry. Due = store time + this level's delay, read from each record (the
        # entry's tags code holds the store's own computation, which need not use the same level table);
        # the level's queue falls due in arrival order, so the round stops at the first entry not yet due.
        base = end = 0
        data: memoryview | None = None
        for i, (phy, size) in enumerate(zip(phys, sizes)):
            if data is None or phy < base or phy + size > end:
                got = get_data(phy)
                data = None
                if got is not None:
                    base, data = got
                    end = base + len(data)
            if data is None or phy + size > end or size < _POS_STORE_TIMESTAMP + 8:
                data = None
                log.warning("schedule entry unreadable, skipped", level=level, offset=offset + i)
                restored.append(None)
                dues.append(now)
                continue
            view = data[phy - base : phy - base + size]
            due = _LONG.unpack_from(view, _POS_STORE_TIMESTAMP)[0] + delay_ms
            if due > now:
                if not restored:
                    return min((due - now) / 1000, IDLE_POLL_S)
                break
            dues.append(due)
            if offset + i in ahead:  # delivered before a failed put or a crash: not again
                restored.append(None)
                continue
            try:
                inner = build(view)
            except Exception as exc:  # a corrupt record must not stall the level
                log.warning("schedule entry undecodable, skipped", level=level, offset=offset + i, error=str(exc))
                inner = None
            else:
                if inner is None:
                    # put back as it is, it would land in this topic again: a loop, not a delivery
                    log.warning("schedule entry without REAL_TOPIC, skipped", level=level, offset=offset + i)
            restored.append(inner)
        data = view = None  # no view of a CommitLog file held across the puts' awaits
        done = [m is None for m in restored]
        failed = False
        try:
            for run in self._runs(restored):
                if level not in self._uncounted_from:
                    self._uncounted_from[level] = self.store.commit_log.get_max_offset()
                msgs = [restored[i] for i in run]
                # (a run, at most batch_max_bytes plus its records' headers, is far below half the limit: its
                # size is only needed once the CommitLog is that far past the file's position)
                if self._recovery_reach(0) > RECOVERY_SCAN_LIMIT // 2:
                    self._write_ahead(level)
                    run_bytes = sum(_record_size_bound(m) for m in msgs)  # type: ignore[arg-type]
                    if self._recovery_reach(run_bytes) > RECOVERY_SCAN_LIMIT:
                        await self._hold_within_scan_limit(level, run_bytes)
                if len(msgs) == 1:
                    put = await self.store.put_message(msgs[0])  # type: ignore[arg-type]
                else:
                    put = await self.store.put_messages(msgs)  # type: ignore[arg-type]
                if put.status != PutMessageStatus.PUT_OK:
                    log.warning(
                        "schedule delivery put failed, will retry",
                        level=level,
                        offset=offset + run[0],
                        count=len(run),
                        status=put.status.name,
                    )
                    failed = True
                    break
                for i in run:
                    done[i] = True
                after = self._now_ms()
                stats = self.stats
                stats.delivered += len(run)
                stats.last_lateness_ms = max(0, after - dues[run[-1]])
                stats.max_lateness_ms = max(stats.max_lateness_ms, after - dues[run[0]])
        finally:
            # also when a put raised: what was put is never put again
            prefix = self._settle(level, offset, done, ahead)
        if failed:
            return RETRY_AFTER_FAILURE_S if prefix == 0 else None
        return None

    def _settle(self, level: int, offset: int, done: list[bool], ahead: Collection[int]) -> int:
        """Progress after a round's puts: the offset moves past the delivered prefix of the round's
        entries; those delivered beyond it (a put after a failed one) are remembered, so the retry skips
        them. Returns the prefix length."""
        taken = len(done)
        prefix = done.index(False) if not all(done) else taken
        left = {offset + i for i in range(prefix, taken) if done[i]}
        left.update(o for o in ahead if o >= offset + taken)
        if left:
            self._ahead[level] = left
        else:
            self._ahead.pop(level, None)
            self._uncounted_from.pop(level, None)
        if prefix:
            self._advance(level, offset + prefix)
        return prefix

    def _recovery_reach(self, run_bytes: int) -> int:
        """How far past the written ``commitLogOffset`` a start after a crash would read once a put of
        ``run_bytes`` is done (other writers' appends meanwhile aside)."""
        return self.store.commit_log.get_max_offset() + run_bytes - self._persisted_below

    async def _hold_within_scan_limit(self, level: int, run_bytes: int) -> None:
        """Before a put that would land past ``RECOVERY_SCAN_LIMIT``: wait for the write ahead in flight (started
        at half the limit, so this wait means the CommitLog grew half the limit during one write), and for one
        more of the state now if that one was older. A write that fails lets the put go (logged by the writer):
        a broken disk must not stop deliveries, it only lengthens the read after a crash. The write is never
        cancelled with the level (``asyncio.wait``): a stop or a crash test's cancel leaves it to finish."""
        for _attempt in range(2):
            early = self._early_write
            if early is None or early.done():
                if self._persisted_below >= self._safe_commit_log_offset():
                    return  # nothing newer to write: this level's own round pins the position
                self._write_ahead(level)  # the write done was of an older state: one of the state now
                early = self._early_write
            assert early is not None
            await asyncio.wait((early,))
            if self._recovery_reach(run_bytes) <= RECOVERY_SCAN_LIMIT:
                return

    def _write_ahead(self, level: int) -> None:
        """Before a put when the file's ``commitLogOffset`` fell half the limit behind: the state is taken
        now, so the file will say the CommitLog was read up to where this put begins, and written in the
        background (unless such a write still runs). The put does not wait for it: an fsync on a busy disk
        takes up to a second (that wait was the lateness of a burst); only a put that would pass the whole
        limit waits (``_hold_within_scan_limit``). A failed write only makes the read after a crash longer."""
        if self._early_write is not None and not self._early_write.done():
            return
        snapshot = self._snapshot()

        async def write() -> None:
            try:
                await self._write(snapshot)
            except OSError as exc:
                log.error("cannot write delayOffset.json ahead of a delivery", level=level, error=str(exc))

        self._early_write = asyncio.get_running_loop().create_task(write(), name="schedule-write-ahead")

    def _runs(self, restored: list[MessageExtBrokerInner | None]) -> list[list[int]]:
        """Indexes of `restored` to put in one append each: the messages of one real queue in their level
        order (order is kept per queue, which is all a consumer sees), not transactional (the batch put
        refuses those: one append each), within the store's batch size limit."""
        groups: dict[tuple[str, int], list[int]] = {}
        runs: list[list[int]] = []
        sizes: dict[tuple[str, int], int] = {}
        limit = self.batch_max_bytes
        for i, m in enumerate(restored):
            if m is None:
                continue
            if m.sys_flag & _TRANSACTION_BITS:
                runs.append([i])
                continue
            key = (m.topic, m.queue_id)
            size = _wire_size(m)
            group = groups.get(key)
            if group is None or sizes[key] + size > limit:
                group = groups[key] = []
                runs.append(group)
                sizes[key] = 0
            group.append(i)
            sizes[key] += size
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
        log.warning(
            "schedule entry unreadable, skipped", level=level, offset=offset, next_offset=nxt, status=result.status.name
        )
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
        return inner_from(msg, topic, queue_id, props, prepared_transaction_offset=msg.prepared_transaction_offset)

    def runtime_info(self) -> dict[str, str]:
        """Upstream's ``scheduleMessageOffset_<level>`` entries ("delivered,max") plus our lateness."""
        info: dict[str, str] = {}
        for level in range(1, self.max_level + 1):
            max_offset = self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            info[f"scheduleMessageOffset_{level}"] = f"{self.offset_table.get(level, 0)},{max_offset}"
        info["scheduleMessageMaxLatenessMs"] = str(self.stats.max_lateness_ms)
        return info
