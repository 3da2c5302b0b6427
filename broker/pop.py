"""PopService: POP consumption as RocketMQ 5 serves it to its gRPC clients.

A consumer *pops* messages: each is handed out with an invisible time, during which no other pop of
the group sees it. An ack removes it for good; a change of invisible duration moves its deadline (and
invalidates the old receipt handle); an unacknowledged message becomes visible again when its
deadline passes (the revive) and is redelivered with its delivery attempt increased; once it has been
delivered the group's maximum number of attempts, the revive forwards it to ``%DLQ%<group>`` instead.
For a FIFO group a queue hands out nothing while one of its messages is invisible, so that messages
are consumed in queue order (every message of one message group lands in one queue).

What this keeps in memory, per (group, topic, queue): the first offset never popped and the popped
offsets that are not acknowledged yet (with deadline, attempt and a token that changes with each
delivery). The consumer offset committed for the queue is the lowest offset not yet acknowledged.
That state is also written to ``config/popCheckpoint.json`` (``export_state``, with the consumer
offsets, periodically and at shutdown) and read back at start (``import_state``): after a restart an
acknowledged message is not redelivered, an unacknowledged one stays invisible until its deadline and
comes back with its attempt count, and receipt handles issued before the restart still work. A crash
loses what changed since the last write (at least once: the consumer offset still bounds it).
Upstream persists its checkpoints in the CommitLog instead (CK/ACK messages and a revive topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from store.message import MessageExt, decode_record

log = structlog.get_logger(__name__)

RECEIPT_HANDLE_VERSION = "p1"


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class InvalidReceiptHandle(ValueError):
    """A receipt handle that is malformed, unknown, or stale (the message was redelivered or acked)."""


@dataclass(slots=True)
class ReceiptHandle:
    queue_id: int
    offset: int
    token: int
    deadline_ms: int

    def encode(self) -> str:
        return f"{RECEIPT_HANDLE_VERSION} {self.queue_id} {self.offset} {self.token} {self.deadline_ms}"

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        parts = text.split(" ")
        if len(parts) != 5 or parts[0] != RECEIPT_HANDLE_VERSION:
            raise InvalidReceiptHandle(f"receipt handle {text[:80]!r} was not issued by this broker")
        try:
            queue_id, offset, token, deadline = (int(p) for p in parts[1:])
        except ValueError:
            raise InvalidReceiptHandle(f"receipt handle {text[:80]!r} is malformed") from None
        return cls(queue_id, offset, token, deadline)


@dataclass(slots=True)
class InFlight:
    offset: int
    deadline_ms: int
    attempt: int  # deliveries so far, 1 on the first
    token: int


@dataclass
class PopQueue:
    """Pop state of one (group, topic, queue)."""

    next_offset: int
    inflight: dict[int, InFlight] = field(default_factory=dict)

    def commit_offset(self) -> int:
        return min(self.inflight) if self.inflight else self.next_offset

    def blocked(self, now: int) -> bool:
        """FIFO: an invisible message holds back everything behind it."""
        return any(f.deadline_ms > now for f in self.inflight.values())


@dataclass(slots=True)
class PoppedMessage:
    message: MessageExt
    receipt_handle: str
    attempt: int
    invisible_ms: int


@dataclass(slots=True)
class PopRequest:
    group: str
    topic: str
    queue_ids: list[int]
    max_nums: int
    invisible_ms: int
    fifo: bool
    max_attempts: int
    matches: Callable[[MessageExt], bool]


class PopService:
    """Owns every group's pop state; the store and offsets are the broker's."""

    def __init__(
        self,
        *,
        store,
        offsets,
        forward_to_dlq: Callable[[str, MessageExt], Awaitable[bool]],
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.forward_to_dlq = forward_to_dlq
        self.now_ms = now_ms
        self._queues: dict[tuple[str, str, int], PopQueue] = {}
        self._tokens = itertools.count(1)
        # long-polling receives by topic, then group, oldest first (see ``wait``)
        self._waiters: dict[str, dict[str, deque[asyncio.Future[None]]]] = {}
        self.revived = 0
        self.dead_lettered = 0
        self.dirty = False  # changed since the last export_state

    # -- checkpoint -------------------------------------------------------------------------------
    def export_state(self) -> dict:
        """Every queue's pop state, for popCheckpoint.json (taken on the event loop, which owns it)."""
        self.dirty = False
        queues = [
            {
                "group": g,
                "topic": t,
                "queueId": q,
                "nextOffset": s.next_offset,
                "inFlight": [[f.offset, f.deadline_ms, f.attempt, f.token] for f in s.inflight.values()],
            }
            for (g, t, q), s in self._queues.items()
        ]
        return {"queues": queues}

    def import_state(self, data: dict) -> None:
        """The state ``export_state`` wrote; what the consumer offsets (possibly written later) count as
        acknowledged is dropped. Tokens go on above the highest one seen, so old handles stay valid."""
        top = 0
        for item in data.get("queues") or ():
            try:
                group, topic, queue_id = str(item["group"]), str(item["topic"]), int(item["queueId"])
                committed = self.offsets.query_offset(group, topic, queue_id)
                state = PopQueue(next_offset=max(int(item["nextOffset"]), committed))
                for offset, deadline, attempt, token in item.get("inFlight") or ():
                    if int(offset) >= committed:
                        state.inflight[int(offset)] = InFlight(int(offset), int(deadline), int(attempt), int(token))
                        top = max(top, int(token))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("pop checkpoint entry unreadable, skipped", entry=str(item)[:200], error=str(exc))
                continue
            self._queues[(group, topic, queue_id)] = state
        self._tokens = itertools.count(top + 1)
        log.info(
            "pop checkpoint loaded",
            queues=len(self._queues),
            in_flight=sum(len(s.inflight) for s in self._queues.values()),
        )

    # -- state ------------------------------------------------------------------------------------
    def _queue(self, group: str, topic: str, queue_id: int) -> PopQueue:
        key = (group, topic, queue_id)
        state = self._queues.get(key)
        if state is None:
            committed = self.offsets.query_offset(group, topic, queue_id)
            start = committed if committed >= 0 else self.store.get_min_offset_in_queue(topic, queue_id)
            state = self._queues[key] = PopQueue(next_offset=start)
        return state

    def _commit(self, group: str, topic: str, queue_id: int, state: PopQueue) -> None:
        self.dirty = True
        self.offsets.commit_offset(group, topic, queue_id, state.commit_offset())

    def in_flight(self, group: str, topic: str) -> int:
        return sum(len(s.inflight) for (g, t, _), s in self._queues.items() if g == group and t == topic)

    # -- pop --------------------------------------------------------------------------------------
    async def pop(self, req: PopRequest) -> list[PoppedMessage]:
        """Hand out up to ``max_nums`` visible messages: revived ones first, then new ones."""
        out: list[PoppedMessage] = []
        for queue_id in req.queue_ids:
            if len(out) >= req.max_nums:
                break
            await self._pop_queue(req, queue_id, out)
        return out

    async def _pop_queue(self, req: PopRequest, queue_id: int, out: list[PoppedMessage]) -> None:
        state = self._queue(req.group, req.topic, queue_id)
        now = self.now_ms()
        if req.fifo and state.blocked(now):
            return
        # The revive: messages whose invisible time passed, in offset order.
        for offset in sorted(o for o, f in state.inflight.items() if f.deadline_ms <= now):
            if len(out) >= req.max_nums:
                return
            entry = state.inflight.get(offset)
            if entry is None or entry.deadline_ms > now:
                continue  # acked or redelivered by a concurrent pop while this one awaited the DLQ
            msg = self._read(req.topic, queue_id, offset)
            if msg is None:  # deleted by retention meanwhile
                del state.inflight[offset]
                continue
            if entry.attempt >= req.max_attempts:
                entry.deadline_ms = now + req.invisible_ms  # no second forward while this one is under way
                if await self.forward_to_dlq(req.group, msg):
                    self.dead_lettered += 1
                    state.inflight.pop(offset, None)
                    self.dirty = True
                    log.info(
                        "message moved to the dead letter queue",
                        group=req.group,
                        topic=req.topic,
                        queue_id=queue_id,
                        offset=offset,
                        attempts=entry.attempt,
                    )
                continue
            self.revived += 1
            out.append(self._deliver(state, queue_id, offset, msg, entry.attempt + 1, req.invisible_ms))
            if req.fifo:
                return
        if req.fifo and state.inflight:
            return
        max_offset = self.store.get_max_offset_in_queue(req.topic, queue_id)
        min_offset = self.store.get_min_offset_in_queue(req.topic, queue_id)
        if state.next_offset < min_offset:
            state.next_offset = min_offset
        while len(out) < req.max_nums and state.next_offset < max_offset:
            # one store read for the rest of the batch, as a pull reads it
            result = self.store.get_message("", req.topic, queue_id, state.next_offset, req.max_nums - len(out))
            if not result.buffers or len(result.msg_queue_offsets) != len(result.buffers):
                if result.next_begin_offset <= state.next_offset:
                    break  # nothing readable yet (the reput is behind the max offset)
                state.next_offset = result.next_begin_offset  # a hole the store skips
                continue
            for buf, offset in zip(result.buffers, result.msg_queue_offsets):
                state.next_offset = offset + 1
                msg = decode_record(buf)
                if req.matches(msg):  # filtered out: as good as acknowledged
                    out.append(self._deliver(state, queue_id, offset, msg, msg.reconsume_times + 1, req.invisible_ms))
            state.next_offset = max(state.next_offset, result.next_begin_offset)
        self._commit(req.group, req.topic, queue_id, state)

    def _read(self, topic: str, queue_id: int, offset: int) -> MessageExt | None:
        result = self.store.get_message("", topic, queue_id, offset, 1)
        if not result.buffers or (result.msg_queue_offsets and result.msg_queue_offsets[0] != offset):
            return None
        return decode_record(result.buffers[0])

    def _deliver(
        self, state: PopQueue, queue_id: int, offset: int, msg: MessageExt, attempt: int, invisible_ms: int
    ) -> PoppedMessage:
        token = next(self._tokens)
        deadline = self.now_ms() + invisible_ms
        state.inflight[offset] = InFlight(offset, deadline, attempt, token)
        self.dirty = True
        handle = ReceiptHandle(queue_id, offset, token, deadline).encode()
        return PoppedMessage(msg, handle, attempt, invisible_ms)

    # -- ack / change invisible time ----------------------------------------------------------------
    def _entry(self, group: str, topic: str, handle: str) -> tuple[PopQueue, ReceiptHandle, InFlight]:
        rh = ReceiptHandle.decode(handle)
        state = self._queues.get((group, topic, rh.queue_id))
        entry = state.inflight.get(rh.offset) if state is not None else None
        if state is None or entry is None:
            raise InvalidReceiptHandle(
                f"no message of topic {topic} in flight for group {group} at queue "
                f"{rh.queue_id} offset {rh.offset} (already acknowledged?)"
            )
        if entry.token != rh.token:
            raise InvalidReceiptHandle(
                "the receipt handle is stale: the message was redelivered or its invisible time changed since"
            )
        return state, rh, entry

    def ack(self, group: str, topic: str, handle: str) -> None:
        state, rh, _ = self._entry(group, topic, handle)
        del state.inflight[rh.offset]
        self._commit(group, topic, rh.queue_id, state)

    def change_invisible_time(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        """New deadline from now; returns the new receipt handle (the old one stops working)."""
        state, rh, entry = self._entry(group, topic, handle)
        earliest = self.next_revive_ms(group, topic)
        entry.token = next(self._tokens)
        entry.deadline_ms = self.now_ms() + invisible_ms
        self.dirty = True
        if earliest is None or entry.deadline_ms < earliest:
            # A parked receive sleeps until the earliest deadline it saw when it parked: woken, it pops nothing
            # yet and parks again until this one (else a nack's retry waited out the whole long poll).
            waiters = self._waiters.get(topic, {}).get(group)
            if waiters:
                self._wake_one(waiters)
        return ReceiptHandle(rh.queue_id, rh.offset, entry.token, entry.deadline_ms).encode()

    def message_of(self, group: str, topic: str, handle: str) -> tuple[MessageExt | None, int]:
        """The in-flight message behind a handle and its delivery attempt (ForwardMessageToDeadLetterQueue)."""
        _, rh, entry = self._entry(group, topic, handle)
        return self._read(topic, rh.queue_id, rh.offset), entry.attempt

    # -- long polling -----------------------------------------------------------------------------
    def notify_arrival(self, topic: str) -> None:
        """A message arrived on ``topic``: wake the oldest waiting receive of each group (upstream's
        PopLongPollingService wakes one request per arrival too). Waking all of them made every receive a
        push consumer keeps in flight pop at once and most of them return with one or two messages."""
        groups = self._waiters.get(topic)
        if groups:
            for waiters in groups.values():
                self._wake_one(waiters)

    def has_waiters(self) -> bool:
        """Whether any receive waits (on any topic): an arrival with none has nothing to wake."""
        return bool(self._waiters)

    @staticmethod
    def _wake_one(waiters: deque[asyncio.Future[None]]) -> None:
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def next_revive_ms(self, group: str, topic: str) -> int | None:
        deadlines = [
            f.deadline_ms
            for (g, t, _), s in self._queues.items()
            if g == group and t == topic
            for f in s.inflight.values()
        ]
        return min(deadlines) if deadlines else None

    async def wait(self, group: str, topic: str, timeout_ms: int) -> None:
        """Until a message arrives on the topic, a popped one turns visible again, or the timeout."""
        revive = self.next_revive_ms(group, topic)
        if revive is not None:
            timeout_ms = max(0, min(timeout_ms, revive - self.now_ms() + 1))
        waiters = self._waiters.setdefault(topic, {}).setdefault(group, deque())
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_ms / 1000)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._wake_one(waiters)  # woken, then cancelled (the call ended): the wake goes to the next
            raise
        finally:
            if not waiter.done() or waiter.cancelled():
                with contextlib.suppress(ValueError):
                    waiters.remove(waiter)
            if not waiters:
                groups = self._waiters.get(topic)
                if groups is not None and groups.get(group) is waiters:
                    del groups[group]
                    if not groups:
                        del self._waiters[topic]
