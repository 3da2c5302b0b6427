"""TransactionalMessageCheckService: asks producers about half messages nobody decided in time.

Every ``transactionCheckInterval`` one round walks the half queue from its consume offset (group
``CID_RMQ_SYS_TRANS``) against the op queue (whose records name decided half offsets), as upstream's
TransactionalMessageServiceImpl.check does:

* a decided half message is passed over;
* one checked ``transactionCheckMax`` times already (``TRANSACTION_CHECK_TIMES``), or older than the
  file retention, is discarded to ``TRANS_CHECK_MAX_TIME_TOPIC`` with one log line;
* the walk stops at the first undecided message younger than ``transactionTimeOut`` (or its own
  ``CHECK_IMMUNITY_TIME_IN_SECONDS``; such a message is re-appended instead so it does not hold up
  the queue, and its op record is then found through ``TRAN_PREPARED_QUEUE_OFFSET``);
* an older one is appended again with its check count + 1 and CHECK_TRANSACTION_STATE (39, oneway)
  goes to a live producer channel of its group, about that new copy. The producer answers with
  END_TRANSACTION (fromTransactionCheck=true) naming the copy's offsets.

Both consume offsets live in the consumer offset table (consumerOffset.json) and the half and op
messages in the store, so the state survives restarts. Offsets only move past what is settled: the
op offset advances over the contiguous run of op records whose half message was passed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from broker.inner_message import inner_from
from broker.message_const import MessageConst
from broker.topic import PERM_READ, PERM_WRITE, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from broker.transaction.service import REMOVE_TAG, TransactionalMessageService
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.headers import CheckTransactionStateRequestHeader, encode_header
from store.message import (
    MessageExt,
    RecordError,
    decode_record,
    encode_record,
    patch_record,
)
from store.results import GetMessageStatus

log = structlog.get_logger(__name__)

CHECK_GROUP = "CID_RMQ_SYS_TRANS"
HALF_QUEUE_ID = 0
#: upstream MAX_PROCESS_TIME_LIMIT: one round never runs longer than this
MAX_ROUND_MS = 60_000
OP_PULL_BATCH = 32
YIELD_EVERY = 64


class CheckConfig(Protocol):
    """The BrokerConfig fields a round reads (live, so updateBrokerConfig takes effect)."""

    transaction_timeout: int
    transaction_check_max: int
    transaction_check_interval: int
    file_reserved_time: int


@dataclass(slots=True)
class CheckRound:
    """What one round did (for logs, runtime info and tests)."""

    checked: int = 0
    discarded: int = 0
    decided: int = 0
    no_producer: int = 0
    half_offset: int = 0
    op_offset: int = 0


@dataclass(slots=True)
class _OpView:
    """Op records read so far in a round: decided half offsets → their op offset, and settled op offsets."""

    read_to: int
    removed: dict[int, int] = field(default_factory=dict)
    done: list[int] = field(default_factory=list)


class TransactionalMessageCheckService:
    def __init__(
        self,
        *,
        store: Any,
        service: TransactionalMessageService,
        offsets: Any,
        config: CheckConfig,
        send_check: Callable[[str, RemotingCommand], bool],
        ensure_topic: Callable[[str], None] | None = None,
        now_ms: Callable[[], int],
    ) -> None:
        """``send_check(group, request)`` sends a CHECK_TRANSACTION_STATE to a live producer channel of
        ``group`` and says whether there was one; ``ensure_topic`` creates TRANS_CHECK_MAX_TIME_TOPIC's
        topic config before the first discard."""
        self.store = store
        self.service = service
        self.offsets = offsets
        self.config = config
        self._send_check = send_check
        self._ensure_topic = ensure_topic
        self._now_ms = now_ms
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._stopping = False
        self.rounds = 0
        self.total = CheckRound()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._stopping = False
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="transaction-check")

    async def stop(self) -> None:
        self._stopping = True
        if self._wakeup is not None:
            self._wakeup.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def wakeup(self) -> None:
        """Run a round now (tests, admin)."""
        if self._wakeup is not None:
            self._wakeup.set()

    async def _run(self) -> None:
        assert self._wakeup is not None
        while not self._stopping:
            try:
                await asyncio.wait_for(self._wakeup.wait(), self.config.transaction_check_interval / 1000)
            except TimeoutError:
                pass
            self._wakeup.clear()
            if self._stopping:
                return
            try:
                await self.check_once()
            except Exception:  # a failed round must not end the service
                log.exception("transaction check round failed")

    # -- one round ---------------------------------------------------------------------------
    async def check_once(self) -> CheckRound:
        cfg = self.config
        start = self._now_ms()
        stats = CheckRound()
        queue_id = HALF_QUEUE_ID
        if self.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, queue_id) <= 0:
            return stats  # no transaction ever: leave the offset table alone (upstream has no queue yet)
        half_offset = self._consume_offset(TRANS_HALF_TOPIC, queue_id)
        op_offset = self._consume_offset(TRANS_OP_HALF_TOPIC, queue_id)
        ops = _OpView(read_to=op_offset)
        self._read_ops(ops, queue_id, half_offset)
        max_half = self.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, queue_id)
        timeout = cfg.transaction_timeout
        i = half_offset
        walked = 0
        while i < max_half and not self._stopping:
            walked += 1
            if walked % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            now = self._now_ms()
            if now - start > MAX_ROUND_MS:
                break
            if i in ops.removed:
                ops.done.append(ops.removed.pop(i))
                stats.decided += 1
                i += 1
                continue
            half = self._half_message(queue_id, i)
            if half is None:  # a hole or a removed file: step over it
                i = max(i + 1, self._next_readable(queue_id, i))
                continue
            check_times = _int(half.properties.get(MessageConst.TRANSACTION_CHECK_TIMES), 0)
            if (
                check_times >= cfg.transaction_check_max
                or now - half.born_timestamp > cfg.file_reserved_time * 3_600_000
            ):
                await self._discard(half, check_times)
                stats.discarded += 1
                i += 1
                continue
            if half.store_timestamp >= start:
                break  # appended during this round (our own copies included)
            age = now - half.born_timestamp
            immunity_text = half.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS)
            if immunity_text:
                immunity = _immunity_ms(immunity_text, timeout)
                if age < immunity:
                    if await self._settle_immune(ops, half):
                        i += 1
                        continue
                    break
            elif 0 <= age < timeout:
                break
            # Due for a check. An END_TRANSACTION may have landed since the round began: look again.
            self._read_ops(ops, queue_id, half_offset)
            if i in ops.removed:
                continue
            half.properties[MessageConst.TRANSACTION_CHECK_TIMES] = str(check_times + 1)
            if not await self._check(half, stats):
                break
            i += 1
        if i != half_offset:
            self.offsets.commit_offset(CHECK_GROUP, TRANS_HALF_TOPIC, queue_id, i)
        new_op_offset = _settled_prefix(ops.done, op_offset)
        if new_op_offset != op_offset:
            self.offsets.commit_offset(CHECK_GROUP, TRANS_OP_HALF_TOPIC, queue_id, new_op_offset)
        stats.half_offset, stats.op_offset = i, new_op_offset
        self.rounds += 1
        for name in ("checked", "discarded", "decided", "no_producer"):
            setattr(self.total, name, getattr(self.total, name) + getattr(stats, name))
        self.total.half_offset, self.total.op_offset = i, new_op_offset
        if stats.checked or stats.discarded:
            log.info(
                "transaction check round",
                checked=stats.checked,
                discarded=stats.discarded,
                decided=stats.decided,
                no_producer=stats.no_producer,
                half_offset=i,
                op_offset=new_op_offset,
            )
        return stats

    # -- pieces ----------------------------------------------------------------------------------
    def _consume_offset(self, topic: str, queue_id: int) -> int:
        offset = self.offsets.query_offset(CHECK_GROUP, topic, queue_id)
        if offset < 0:
            offset = max(0, self.store.get_min_offset_in_queue(topic, queue_id))
            self.offsets.commit_offset(CHECK_GROUP, topic, queue_id, offset)
        return offset

    def _read_ops(self, ops: _OpView, queue_id: int, half_offset: int) -> None:
        """Read op records from where the last read stopped up to the end of the op queue."""
        while True:
            result = self.store.get_message(
                CHECK_GROUP, TRANS_OP_HALF_TOPIC, queue_id, ops.read_to, OP_PULL_BATCH, None
            )
            if result.status != GetMessageStatus.FOUND:
                if (
                    result.status
                    in (
                        GetMessageStatus.OFFSET_TOO_SMALL,
                        GetMessageStatus.NO_MATCHED_MESSAGE,
                        GetMessageStatus.MESSAGE_WAS_REMOVING,
                    )
                    and result.next_begin_offset > ops.read_to
                ):
                    ops.done.extend(range(ops.read_to, result.next_begin_offset))
                    ops.read_to = result.next_begin_offset
                    continue
                return
            for op_offset, buf in zip(result.msg_queue_offsets, result.buffers):
                try:
                    op = decode_record(buf)
                    decided = int(op.body.decode()) if op.properties.get(MessageConst.TAGS) == REMOVE_TAG else None
                except (RecordError, ValueError, UnicodeDecodeError):
                    log.warning("unreadable transaction op record, ignored", op_offset=op_offset)
                    decided = None
                if decided is None or decided < half_offset:
                    ops.done.append(op_offset)
                else:
                    ops.removed[decided] = op_offset
            ops.read_to = result.next_begin_offset

    def _half_message(self, queue_id: int, offset: int) -> MessageExt | None:
        result = self.store.get_message(CHECK_GROUP, TRANS_HALF_TOPIC, queue_id, offset, 1, None)
        if result.status != GetMessageStatus.FOUND or not result.buffers:
            return None
        try:
            return decode_record(result.buffers[0])
        except RecordError:
            log.warning("unreadable half message, skipped", half_offset=offset)
            return None

    def _next_readable(self, queue_id: int, offset: int) -> int:
        result = self.store.get_message(CHECK_GROUP, TRANS_HALF_TOPIC, queue_id, offset, 1, None)
        return result.next_begin_offset

    async def _discard(self, half: MessageExt, check_times: int) -> None:
        if self._ensure_topic is not None:
            self._ensure_topic(TRANS_CHECK_MAX_TIME_TOPIC)
        result = await self.store.put_message(self.service.discarded_message(half))
        log.warning(
            "half message checked too many times or too old, discarded to TRANS_CHECK_MAX_TIME_TOPIC",
            msg_id=half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            group=half.properties.get(MessageConst.PRODUCER_GROUP),
            check_times=check_times,
            half_offset=half.queue_offset,
            stored=result.is_ok(),
        )

    async def _settle_immune(self, ops: _OpView, half: MessageExt) -> bool:
        """upstream checkPrepareQueueOffset: an immune message is decided through its original offset,
        else appended again (carrying that offset) so that younger messages behind it get checked."""
        original = _int(half.properties.get(MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET), None)
        if original is not None and original in ops.removed:
            ops.done.append(ops.removed.pop(original))
            return True
        copy = self.service.renew_half_message(half)
        if original is None:
            copy.set_properties(
                {**copy.properties, MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET: str(half.queue_offset)}
            )
        result = await self.store.put_message(copy)
        return result.is_ok()

    async def _check(self, half: MessageExt, stats: CheckRound) -> bool:
        """Append the copy to be checked and ask a producer of its group about it."""
        result = await self.store.put_message(self.service.renew_half_message(half))
        if not result.is_ok():
            log.warning(
                "cannot put back a half message for its check", half_offset=half.queue_offset, status=result.status.name
            )
            return False
        ar = result.append_result
        group = half.properties.get(MessageConst.PRODUCER_GROUP, "")
        request = self.build_check_request(half, ar.logics_offset, ar.wrote_offset, ar.msg_id, ar.store_timestamp)
        stats.checked += 1
        if not group or not self._send_check(group, request):
            stats.no_producer += 1
            log.warning(
                "no live producer to check a transaction with",
                group=group,
                msg_id=request.ext_fields.get("msgId"),
                half_offset=ar.logics_offset,
            )
        return True

    @staticmethod
    def build_check_request(
        half: MessageExt, queue_offset: int, commit_log_offset: int, offset_msg_id: str, store_timestamp: int
    ) -> RemotingCommand:
        """CHECK_TRANSACTION_STATE about the copy at (queue_offset, commit_log_offset): the body is that
        message in stored form with its real topic and queue (upstream sendCheckMessage)."""
        uniq = half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            msg_id=uniq,
            transaction_id=uniq,
            offset_msg_id=offset_msg_id,
        )
        props = half.properties
        topic = props.get(MessageConst.REAL_TOPIC, half.topic)
        queue_id = _int(props.get(MessageConst.REAL_QID), 0)
        record = encode_record(inner_from(half, topic, queue_id, dict(props)))
        patch_record(record, 0, queue_offset, commit_log_offset, store_timestamp)
        return RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE, encode_header(header), bytes(record), oneway=True
        )


def _settled_prefix(done: list[int], start: int) -> int:
    """upstream calculateOpOffset: move past the contiguous run of settled op offsets from ``start``."""
    offset = start
    for value in sorted(set(done)):
        if value < offset:
            continue
        if value != offset:
            break
        offset += 1
    return offset


def _immunity_ms(text: str, default_ms: int) -> int:
    seconds = _int(text, -1)
    return default_ms if seconds == -1 else seconds * 1000


def _int(text: str | None, default):
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        return default


def send_to_producer(producer_manager: Any) -> Callable[[str, RemotingCommand], bool]:
    """``send_check`` over a live channel of the group (upstream Broker2Client.checkProducerTransactionState)."""

    def send(group: str, request: RemotingCommand) -> bool:
        channel = producer_manager.get_available_channel(group)
        if channel is None:
            return False
        try:
            channel.invoke_oneway(request)
        except Exception as exc:  # noqa: BLE001 - a peer gone between the lookup and the write
            log.info("cannot send a transaction check", group=group, remote=channel.remote_addr, error=str(exc))
            return False
        return True

    return send


def system_topic_creator(topic_config_manager: Any) -> Callable[[str], None]:
    """``ensure_topic`` for TRANS_CHECK_MAX_TIME_TOPIC: one read-write queue, as upstream creates it."""

    def ensure(topic: str) -> None:
        if topic_config_manager.select_topic_config(topic) is None:
            topic_config_manager.create_topic_in_send_message_back_method(topic, 1, PERM_READ | PERM_WRITE)

    return ensure
