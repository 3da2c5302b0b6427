"""TimerMessageService: delivers a message at its own delivery time, not at the next delay level.

5.x producers (``TIMER_DELIVER_MS``: an absolute time; ``TIMER_DELAY_SEC``/``TIMER_DELAY_MS``: a delay
from now) ask for an exact time; 5.x brokers park such a message in ``rmq_sys_wheel_timer`` and a timer
wheel puts it back when due. Here the send path (``park``) rewrites the message into that topic's queue 0
with its real topic and queue in ``REAL_TOPIC``/``REAL_QID`` and the due time in ``TIMER_OUT_MS``
(upstream's names); this service keeps a heap of ``(due, consume-queue offset)`` over the parked entries
not yet delivered, rebuilt at start by reading the parked queue, and sleeps until the head is due (woken
when a message is parked).

Parked entries fall due in any order, so progress is not one offset as for a delay level: it is
``deliveredBelow`` (every entry below it delivered) plus the delivered entries above it, written to
``config/timerOffset.json`` as ranges. As in the delay-level service (``broker.schedule``, whose restore
and copy matching this reuses), the file also holds ``commitLogOffset``, a CommitLog position below which
every delivered copy is counted; after a crash the copies from there to the end are matched with the
parked entries, so a delivery put before the crash is not repeated.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from pathlib import Path

import structlog

from broker.config_file import dumps, read_config, write_atomically, write_if_changed
from broker.message_const import MessageConst
from broker.schedule import ScheduleMessageService, _copy_key, scan_delivered_copies, wait_event
from store.message import MessageExt, MessageExtBrokerInner, decode_record
from store.results import GetMessageStatus, PutMessageStatus

log = structlog.get_logger(__name__)

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"
# upstream timerMaxDelaySec's default: three days
MAX_DELAY_MS = 3 * 24 * 3600 * 1000
IDLE_POLL_S = 1.0
RETRY_AFTER_FAILURE_S = 0.1
BATCH_MAX_MESSAGES = 512


class TimerPropertyError(ValueError):
    """A timer property a send cannot honour (upstream answers WHEEL_TIMER_MSG_ILLEGAL)."""


def deliver_ms_of(props: dict[str, str], now_ms: int) -> int | None:
    """The delivery time a message asks for by its timer properties, None if it asks for none.
    ``TIMER_DELIVER_MS`` wins over ``TIMER_DELAY_SEC`` over ``TIMER_DELAY_MS`` (upstream's order)."""
    for name, scale, relative in (
        (TIMER_DELIVER_MS, 1, False),
        (TIMER_DELAY_SEC, 1000, True),
        (TIMER_DELAY_MS, 1, True),
    ):
        raw = props.get(name)
        if raw is None:
            continue
        try:
            value = int(raw)
        except ValueError:
            raise TimerPropertyError(f"{name} must be an integer, not {raw[:32]!r}") from None
        due = now_ms + value * scale if relative else value
        if due - now_ms > MAX_DELAY_MS:
            raise TimerPropertyError(
                f"{name} asks for a delivery more than {MAX_DELAY_MS // 1000} s ahead (timerMaxDelaySec)"
            )
        return due
    return None


def park(props: dict[str, str], topic: str, queue_id: int, now_ms: int) -> tuple[str, int]:
    """Upstream HookUtils.handleScheduleMessage for a send: a message with a delivery time ahead goes to
    the timer topic (its properties updated in place); returns the topic and queue to store it in. A
    ``DELAY`` level wins: the timer properties are dropped, as upstream does."""
    if props.get(MessageConst.DELAY, "0") not in ("", "0"):
        for name in (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS):
            props.pop(name, None)
        return topic, queue_id
    due = deliver_ms_of(props, now_ms)
    if due is None or due <= now_ms:
        return topic, queue_id
    props[TIMER_OUT_MS] = str(due)
    props[MessageConst.REAL_TOPIC] = topic
    props[MessageConst.REAL_QID] = str(queue_id)
    return TIMER_TOPIC, 0


def _is_timer_copy(msg: MessageExt) -> bool:
    props = msg.properties
    return msg.topic != TIMER_TOPIC and TIMER_OUT_MS in props and MessageConst.REAL_TOPIC in props


def _ranges(offsets: set[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o:
            out[-1][1] = o + 1
        else:
            out.append([o, o + 1])
    return out


class TimerMessageService:
    def __init__(
        self,
        *,
        store,
        store_path_root_dir: str,
        now_ms: Callable[[], int],
        batch_max_messages: int = BATCH_MAX_MESSAGES,
    ) -> None:
        self.store = store
        self._now_ms = now_ms
        self.batch_max_messages = max(1, batch_max_messages)
        self._path = Path(store_path_root_dir) / "config" / "timerOffset.json"
        self.delivered_below = 0
        self._done: set[int] = set()  # delivered entries at or above delivered_below
        self._heap: list[tuple[int, int]] = []
        self._next_read = 0  # the parked queue's next entry not read into the heap
        self._loaded_below: int | None = None
        self._uncounted_from: int | None = None  # CommitLog end before the put in progress
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._persister: asyncio.Task[None] | None = None
        self._persist_wanted: asyncio.Event | None = None
        self._stopping = False
        self.delivered = 0
        self.max_lateness_ms = 0

    def on_message_arriving(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # -- lifecycle ---------------------------------------------------------------------------
    def load(self) -> None:
        data = read_config(self._path)
        if not data:
            return
        self.delivered_below = max(0, int(data.get("deliveredBelow", 0)))
        self._done = {
            o for a, b in data.get("deliveredAhead", []) for o in range(int(a), int(b)) if o >= self.delivered_below
        }
        below = data.get("commitLogOffset")
        self._loaded_below = below if isinstance(below, int) and below >= 0 else None

    def _snapshot(self) -> bytes:
        ends = [self.store.commit_log.get_max_offset()]
        if self._uncounted_from is not None:
            ends.append(self._uncounted_from)
        return dumps(
            {
                "deliveredBelow": self.delivered_below,
                "deliveredAhead": _ranges(self._done),
                "commitLogOffset": min(ends),
            }
        )

    def persist(self) -> None:
        write_if_changed(self._path, self._snapshot())

    def start(self) -> None:
        self._stopping = False
        self._rebuild()
        self.persist()
        loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._persist_wanted = asyncio.Event()
        self._task = loop.create_task(self._run(), name="timer-deliver")
        self._persister = loop.create_task(self._persist_loop(), name="timer-persist")

    def _rebuild(self) -> None:
        """The heap from the parked queue; after a crash, entries whose copy is already in the CommitLog
        beyond the file's ``commitLogOffset`` count as delivered."""
        copies: dict[tuple, int] = {}
        if self._loaded_below is not None and self._loaded_below < self.store.commit_log.get_max_offset():
            copies, scanned = scan_delivered_copies(self.store, self._loaded_below, _is_timer_copy)
            log.info(
                "timer recovery scan",
                commit_log_from=self._loaded_below,
                records_scanned=scanned,
                copies=sum(copies.values()),
            )
        self._heap = []
        lowest = self.store.get_min_offset_in_queue(TIMER_TOPIC, 0)
        if lowest > self.delivered_below:
            self.delivered_below = lowest
            self._done = {o for o in self._done if o >= lowest}
        self._next_read = self.delivered_below
        recovered = self._read_parked(copies)
        heapq.heapify(self._heap)
        self._compact()
        if recovered:
            log.info("timer recovery", delivered_not_recorded=recovered)

    def _read_parked(self, copies: dict[tuple, int] | None = None) -> int:
        """Reads the parked entries from ``_next_read`` to the queue's end into the heap; returns how many
        matched a copy in `copies` (marked delivered instead)."""
        matched = 0
        end = self.store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        while self._next_read < end:
            offset = self._next_read
            result = self.store.get_message("", TIMER_TOPIC, 0, offset, 1, None)
            if result.status != GetMessageStatus.FOUND or not result.buffers:
                self._next_read = max(offset + 1, result.next_begin_offset)
                log.warning("timer entry unreadable, skipped", offset=offset, status=result.status.name)
                for o in range(offset, self._next_read):
                    self._done.add(o)
                continue
            self._next_read = offset + 1
            if offset in self._done:
                continue
            try:
                parked = decode_record(result.buffers[0])
                due = int(parked.properties[TIMER_OUT_MS])
                if copies:
                    inner = self.restore(parked)
                    key = _copy_key(inner.topic, inner.queue_id, parked, inner.properties_string)
                    if copies.get(key):
                        copies[key] -= 1
                        self._done.add(offset)
                        matched += 1
                        continue
            except Exception as exc:  # noqa: BLE001 - a corrupt entry must not stall the others
                log.warning("timer entry undecodable, skipped", offset=offset, error=str(exc))
                self._done.add(offset)
                continue
            heapq.heappush(self._heap, (due, offset))
        return matched

    async def stop(self) -> None:
        self._stopping = True
        if self._wakeup is not None:
            self._wakeup.set()
        for task in (self._task, self._persister):
            if task is not None:
                if self._persist_wanted is not None:
                    self._persist_wanted.set()
                await asyncio.gather(task, return_exceptions=True)
        self._task = self._persister = None
        self.persist()

    async def _persist_loop(self) -> None:
        assert self._persist_wanted is not None
        while not self._stopping:
            await self._persist_wanted.wait()
            self._persist_wanted.clear()
            if self._stopping:
                return
            try:
                payload = self._snapshot()
                await asyncio.to_thread(write_atomically, self._path, payload)
            except OSError as exc:
                log.error("cannot write timerOffset.json", error=str(exc))
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)
                self._persist_wanted.set()

    # -- delivery ----------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._wakeup is not None
        while not self._stopping:
            self._wakeup.clear()
            try:
                self._read_parked()
                wait_s = await self._deliver_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("timer delivery failed")
                wait_s = RETRY_AFTER_FAILURE_S
            if self._stopping:
                break
            await wait_event(self._wakeup, wait_s)  # (unlike asyncio.wait_for, never loses a cancel)

    async def _deliver_due(self) -> float:
        """Puts the due entries in due order (a bounded batch, then a yield); returns how long to sleep."""
        heap = self._heap
        while heap and not self._stopping:
            now = self._now_ms()
            if heap[0][0] > now:
                return min((heap[0][0] - now) / 1000, IDLE_POLL_S)
            for _ in range(self.batch_max_messages):
                if not heap or heap[0][0] > now or self._stopping:
                    break
                due, offset = heapq.heappop(heap)
                if not await self._deliver_one(due, offset):
                    heapq.heappush(heap, (due, offset))
                    return RETRY_AFTER_FAILURE_S
            assert self._persist_wanted is not None
            self._persist_wanted.set()
            await asyncio.sleep(0)
        return IDLE_POLL_S

    async def _deliver_one(self, due: int, offset: int) -> bool:
        result = self.store.get_message("", TIMER_TOPIC, 0, offset, 1, None)
        if result.status != GetMessageStatus.FOUND or not result.buffers:
            log.warning("timer entry gone, skipped", offset=offset, status=result.status.name)
            self._mark(offset)
            return True
        try:
            inner = self.restore(decode_record(result.buffers[0]))
        except Exception as exc:  # noqa: BLE001 - a corrupt entry must not stall the others
            log.warning("timer entry undecodable, skipped", offset=offset, error=str(exc))
            self._mark(offset)
            return True
        self._uncounted_from = self.store.commit_log.get_max_offset()
        try:
            put = await self.store.put_message(inner)
            if put.status != PutMessageStatus.PUT_OK:
                log.warning("timer delivery put failed, will retry", offset=offset, status=put.status.name)
                return False
            self._mark(offset)  # no await between the put's return and this: a snapshot never misses it
        finally:
            self._uncounted_from = None
        self.delivered += 1
        self.max_lateness_ms = max(self.max_lateness_ms, self._now_ms() - due)
        return True

    def _mark(self, offset: int) -> None:
        self._done.add(offset)
        self._compact()

    def _compact(self) -> None:
        while self.delivered_below in self._done:
            self._done.discard(self.delivered_below)
            self.delivered_below += 1

    @staticmethod
    def restore(msg: MessageExt) -> MessageExtBrokerInner:
        """The message as it goes to its real topic and queue (``TIMER_OUT_MS`` and ``REAL_TOPIC`` stay:
        they mark the copy for crash recovery, and tell a 5.x consumer its delivery time)."""
        return ScheduleMessageService.restore(msg)

    def runtime_info(self) -> dict[str, str]:
        return {
            "timerDelivered": str(self.delivered),
            "timerParked": str(len(self._heap)),
            "timerMaxLatenessMs": str(self.max_lateness_ms),
        }
