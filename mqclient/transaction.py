"""``TransactionProducer``: transactional messages, the producer side as the Java client does it.

``send_message_in_transaction(msg, arg)`` (J ``TransactionMQProducer.sendMessageInTransaction``):

1. the message gets ``TRAN_MSG=true`` and ``PGROUP=<group>`` (a delay level is dropped, as J does) and
   is sent synchronously with the PREPARED bit (0x4) in its sysFlag: the broker keeps it as a half
   message that no consumer sees;
2. on SEND_OK the listener's ``execute_local_transaction(msg, arg)`` runs (its exception counts as
   UNKNOW); any other send status means ROLLBACK without running it;
3. END_TRANSACTION (oneway) goes to the broker that holds the half message: ``commitOrRollback`` 8
   (commit), 12 (rollback) or 0 (unknown: the broker will ask later), ``tranStateTableOffset`` = the
   send's queue offset, ``commitLogOffset`` decoded from the offset message id, ``msgId`` = UNIQ_KEY.

The broker asks about undecided half messages with CHECK_TRANSACTION_STATE over a connection that
registered the producer group by heartbeat. The client answers every check with the listener's
``check_local_transaction(msg)`` as END_TRANSACTION with ``fromTransactionCheck=true`` and the
offsets named by the check. Heartbeats go to every broker the producer sent to: at once after the
first send to it, then every ``heartbeat_interval_s`` (J sends them every 30 s).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import orjson
import structlog

from mqclient.errors import MQClientError
from mqclient.message import Message, MessageDecodeError, MessageExt, decode_messages, new_client_id
from mqclient.producer import Producer, ProducerConfig, SendResult
from mqclient.route import MessageQueue
from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    decode_header,
    encode_header,
)
from remoting.signature import SessionCredentials

log = structlog.get_logger(__name__)

PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_DELAY = "DELAY"
PROPERTY_TRANSACTION_ID = "__transactionId__"
SYSFLAG_TRANSACTION_PREPARED = 0x4
TRANSACTION_NOT_TYPE = 0
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


class LocalTransactionState(str, enum.Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # sic, J's spelling

    @property
    def commit_or_rollback(self) -> int:
        return {
            LocalTransactionState.COMMIT_MESSAGE: TRANSACTION_COMMIT_TYPE,
            LocalTransactionState.ROLLBACK_MESSAGE: TRANSACTION_ROLLBACK_TYPE,
        }.get(self, TRANSACTION_NOT_TYPE)


StateOrAwaitable = LocalTransactionState | Awaitable[LocalTransactionState]


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> StateOrAwaitable: ...

    def check_local_transaction(self, msg: MessageExt) -> StateOrAwaitable: ...


@dataclass(slots=True)
class TransactionSendResult:
    send_result: SendResult
    local_state: LocalTransactionState
    local_error: str | None = None
    end_sent_to: str | None = None

    @property
    def msg_id(self) -> str:
        return self.send_result.msg_id


@dataclass(slots=True)
class CheckRecord:
    """One CHECK_TRANSACTION_STATE this producer answered (for tests and diagnostics)."""

    msg_id: str | None
    broker: str
    tran_state_table_offset: int
    commit_log_offset: int
    state: LocalTransactionState


class _PreparedSendProducer(Producer):
    """A Producer whose requests carry the PREPARED sysFlag bit for half messages (J sendKernelImpl)."""

    def _request(self, msg: Message, mq: MessageQueue, **kw: Any) -> RemotingCommand:
        request = super()._request(msg, mq, **kw)
        if msg.properties.get(PROPERTY_TRANSACTION_PREPARED) == "true":
            key = "f" if "f" in request.ext_fields else "sysFlag"
            request.ext_fields[key] = str(int(request.ext_fields.get(key, "0")) | SYSFLAG_TRANSACTION_PREPARED)
        return request


class TransactionProducer:
    def __init__(
        self,
        namesrv: str | Sequence[str],
        listener: TransactionListener,
        config: ProducerConfig | None = None,
        *,
        client: RemotingClient | None = None,
        client_id: str | None = None,
        heartbeat_interval_s: float = 30.0,
        now_ms: Callable[[], int] | None = None,
        credentials: SessionCredentials | None = None,
    ) -> None:
        self.config = config or ProducerConfig()
        self.listener = listener
        self.client = client or RemotingClient(credentials=credentials)
        self._own_client = client is None
        self.producer = _PreparedSendProducer(namesrv, self.config, client=self.client, now_ms=now_ms)
        self.client_id = client_id or new_client_id("tx")
        self.heartbeat_interval_s = heartbeat_interval_s
        self.brokers: set[str] = set()
        self.checks: list[CheckRecord] = []
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._check_tasks: set[asyncio.Task[None]] = set()

    @property
    def group(self) -> str:
        return self.config.group

    # ---- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        self.client.set_request_handler(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)
        await self.producer.start()
        self._heartbeat_task = asyncio.get_running_loop().create_task(
            self._heartbeat_loop(), name="tx-producer-heartbeat"
        )

    async def close(self) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        for task in list(self._check_tasks):
            task.cancel()
        await asyncio.gather(*self._check_tasks, return_exceptions=True)
        for addr in sorted(self.brokers):
            request = RemotingCommand.request(
                RequestCode.UNREGISTER_CLIENT, {"clientID": self.client_id, "producerGroup": self.group}
            )
            try:
                await self.client.invoke(addr, request, 3.0)
            except RemotingError:
                pass
        await self.producer.close()
        if self._own_client:
            await self.client.close()

    async def __aenter__(self) -> TransactionProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- heartbeats -----------------------------------------------------------------------------
    def heartbeat_body(self) -> bytes:
        return orjson.dumps(
            {
                "clientID": self.client_id,
                "consumerDataSet": [],
                "producerDataSet": [{"groupName": self.group}, {"groupName": "CLIENT_INNER_PRODUCER"}],
            }
        )

    async def heartbeat(self, addr: str) -> None:
        request = RemotingCommand.request(RequestCode.HEART_BEAT, {}, self.heartbeat_body())
        response = await self.client.invoke(addr, request, 3.0)
        if response.code != ResponseCode.SUCCESS:
            raise MQClientError(f"heartbeat to {addr} refused: {response.code} {response.remark}")

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_s)
            for addr in sorted(self.brokers):
                try:
                    await self.heartbeat(addr)
                except (RemotingError, MQClientError) as exc:
                    log.info("transaction producer heartbeat failed", broker=addr, error=str(exc))

    async def _register_with(self, addr: str) -> None:
        if addr in self.brokers:
            return
        self.brokers.add(addr)
        try:
            await self.heartbeat(addr)
        except (RemotingError, MQClientError) as exc:
            log.info("transaction producer heartbeat failed", broker=addr, error=str(exc))

    # ---- sending ----------------------------------------------------------------------------------
    async def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        props = dict(msg.properties)
        props.pop(PROPERTY_DELAY, None)  # J: "ignore DelayTimeLevel parameter"
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = self.group
        half = replace(msg, properties=props)
        result = await self.producer.send(half)
        await self._register_with(result.broker)
        local_error: str | None = None
        if result.status == "SEND_OK":
            if result.transaction_id:
                half.properties[PROPERTY_TRANSACTION_ID] = result.transaction_id
            try:
                state = await _resolve(self.listener.execute_local_transaction(half, arg))
                if not isinstance(state, LocalTransactionState):
                    state = LocalTransactionState(state)
            except Exception as exc:  # noqa: BLE001 - J logs it and reports UNKNOW
                local_error = f"{type(exc).__name__}: {exc}"
                state = LocalTransactionState.UNKNOW
                log.info("executeLocalTransactionBranch exception", msg_id=result.msg_id, error=local_error)
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        await self.end_transaction(result, state, local_error)
        return TransactionSendResult(result, state, local_error, result.broker)

    async def end_transaction(
        self, result: SendResult, state: LocalTransactionState, local_error: str | None = None
    ) -> None:
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=_offset_of(result.offset_msg_id or result.msg_id),
            commit_or_rollback=state.commit_or_rollback,
            msg_id=result.msg_id,
            from_transaction_check=False,
            transaction_id=result.transaction_id,
        )
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, encode_header(header))
        if local_error:
            request.remark = f"executeLocalTransactionBranch exception: {local_error}"
        await self.client.invoke_oneway(result.broker, request)

    # ---- check-backs --------------------------------------------------------------------------------
    async def _on_check(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        # J answers from a thread pool; the reply is a separate oneway request, so do not hold the reader.
        task = asyncio.get_running_loop().create_task(self._answer_check(channel, request))
        self._check_tasks.add(task)
        task.add_done_callback(self._check_tasks.discard)
        return None

    async def _answer_check(self, channel: Channel, request: RemotingCommand) -> None:
        try:
            header = decode_header(CheckTransactionStateRequestHeader, request.ext_fields)
            messages = decode_messages(request.body or b"")
        except (ValueError, MessageDecodeError) as exc:
            log.warning("bad CHECK_TRANSACTION_STATE from the broker", remote=channel.remote_addr, error=str(exc))
            return
        if not messages:
            return
        msg = messages[0]
        group = msg.properties.get(PROPERTY_PRODUCER_GROUP)
        if group != self.group:
            log.warning("transaction check for another producer group", group=group, mine=self.group)
            return
        error: str | None = None
        try:
            state = await _resolve(self.listener.check_local_transaction(msg))
            if not isinstance(state, LocalTransactionState):
                state = LocalTransactionState(state)
        except Exception as exc:  # noqa: BLE001 - J reports UNKNOW with the exception as remark
            error = f"{type(exc).__name__}: {exc}"
            state = LocalTransactionState.UNKNOW
        unique_key = msg.properties.get("UNIQ_KEY") or msg.offset_msg_id
        answer = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=state.commit_or_rollback,
            msg_id=unique_key,
            from_transaction_check=True,
            transaction_id=header.transaction_id,
        )
        reply = RemotingCommand.request(RequestCode.END_TRANSACTION, encode_header(answer))
        if error:
            reply.remark = f"checkLocalTransactionState Exception: {error}"
        self.checks.append(
            CheckRecord(
                header.msg_id, channel.remote_addr, header.tran_state_table_offset, header.commit_log_offset, state
            )
        )
        try:
            channel.invoke_oneway(reply)
        except RemotingError as exc:
            log.info("cannot answer a transaction check", remote=channel.remote_addr, error=str(exc))


async def _resolve(value: StateOrAwaitable) -> LocalTransactionState:
    if inspect.isawaitable(value):
        return await value
    return value


def _offset_of(offset_msg_id: str) -> int:
    """The commit-log offset in an offset message id: its last 16 hex digits (J decodeMessageId)."""
    if len(offset_msg_id) < 16:
        raise MQClientError(f"not an offset message id: {offset_msg_id!r}")
    return int(offset_msg_id[-16:], 16)
