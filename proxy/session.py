"""A 5.x client's session: Heartbeat, NotifyClientTermination and the Telemetry stream (settings, transaction
checks from the broker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import orjson
import structlog

from broker.message_const import MessageConst
from broker.topic import TopicConfig
from proxy.common import (
    CONSUMER_BACKOFF_S,
    MAX_BATCH,
    OK,
    PRODUCER_BACKOFF,
    CallError,
    ClientState,
    ServiceBase,
    Undecodable,
    code_of,
    is_fifo,
    producer_group,
    status,
    transaction_id,
)
from proxy.convert import to_message
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store.message import decode_record

log = structlog.get_logger(__name__)


class SessionCalls(ServiceBase):
    """Heartbeat / NotifyClientTermination / Telemetry."""

    # -- Heartbeat / NotifyClientTermination / Telemetry ---------------------------------------------------
    async def Heartbeat(self, request, context) -> spb.HeartbeatResponse:
        return await self._guard(context, self._heartbeat, request, spb.HeartbeatResponse)

    async def _heartbeat(self, request, context) -> spb.HeartbeatResponse:
        self._forget_expired_clients()
        state = self._client(context)
        if request.HasField("group") and request.group.name:
            state.group = request.group.name
        if request.client_type:
            state.client_type = request.client_type
        response = await self._call(state, self._heartbeat_request(state))
        if response.code != ResponseCode.SUCCESS:
            return spb.HeartbeatResponse(status=status(code_of(response.code), response.remark or ""))
        return spb.HeartbeatResponse(status=OK)

    def _forget_expired_clients(self) -> None:
        """Clients whose channel the broker's housekeeping closed (no heartbeat for channelExpiredTimeout)."""
        for client_id in [cid for cid, s in self.clients.items() if not s.channel.is_active]:
            del self.clients[client_id]

    def _heartbeat_request(self, state: ClientState) -> RemotingCommand:
        """The 4.x HEART_BEAT this client amounts to: producers of each topic, or one consumer group."""
        data: dict[str, Any] = {"clientID": state.channel.client_id, "producerDataSet": [], "consumerDataSet": []}
        if state.client_type == pb.PRODUCER:
            data["producerDataSet"] = [{"groupName": producer_group(t)} for t in state.topics]
        elif state.group:
            subs = [
                {
                    "topic": topic,
                    "subString": expr.expression or "*",
                    "expressionType": "SQL92" if expr.type == pb.SQL else "TAG",
                    "tagsSet": [],
                    "codeSet": [],
                    "subVersion": 0,
                    "classFilterMode": False,
                }
                for topic, expr in state.subscriptions.items()
            ]
            data["consumerDataSet"] = [
                {
                    "groupName": state.group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": subs,
                    "unitMode": False,
                }
            ]
        request = RemotingCommand.request(RequestCode.HEART_BEAT, {}, orjson.dumps(data))
        request.language = "PYTHON"
        return request

    async def NotifyClientTermination(self, request, context) -> spb.NotifyClientTerminationResponse:
        return await self._guard(context, self._notify_termination, request, spb.NotifyClientTerminationResponse)

    async def _notify_termination(self, request, context) -> spb.NotifyClientTerminationResponse:
        state = self._client(context)
        self.clients.pop(state.channel.client_id, None)
        state.channel.close()
        self.c.on_channel_close(state.channel.remote_addr, state.channel)
        return spb.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator, context) -> AsyncIterator[spb.TelemetryCommand]:
        try:
            state = self._client(context)
        except CallError as exc:
            await context.abort(exc.code, str(exc))
            return
        outbox: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()
        state.telemetry = outbox  # type: ignore[assignment]

        async def read() -> None:
            try:
                async for command in request_iterator:
                    if isinstance(command, Undecodable):
                        log.warning(
                            "telemetry command cannot be decoded", client=state.channel.client_id, error=command.error
                        )
                        outbox.put_nowait(
                            spb.TelemetryCommand(
                                status=status(
                                    pb.BAD_REQUEST, f"the command is not a valid TelemetryCommand: {command.error}"
                                )
                            )
                        )
                        continue
                    if self.acl is not None:
                        reason = self.acl.refusal(command, context.invocation_metadata(), state.channel.remote_addr)
                        if reason is not None:
                            outbox.put_nowait(spb.TelemetryCommand(status=status(pb.UNAUTHORIZED, reason)))
                            continue
                    reply = await self._on_telemetry(state, command)
                    if reply is not None:
                        outbox.put_nowait(reply)
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                pass
            except Exception as exc:  # noqa: BLE001 - one bad command ends this stream, not the server
                log.warning("telemetry stream failed", client=state.channel.client_id, error=str(exc))
            finally:
                outbox.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while True:
                item = await outbox.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            if state.telemetry is outbox:
                state.telemetry = None

    async def _on_telemetry(self, state: ClientState, command: spb.TelemetryCommand) -> spb.TelemetryCommand | None:
        kind = command.WhichOneof("command")
        if kind == "settings":
            return spb.TelemetryCommand(status=OK, settings=self._settings(state, command.settings))
        if kind in ("thread_stack_trace", "verify_message_result"):
            return None
        return spb.TelemetryCommand(status=status(pb.NOT_IMPLEMENTED, f"telemetry command {kind} is not served"))

    def _settings(self, state: ClientState, settings: pb.Settings) -> pb.Settings:
        """Record the client's settings; answer with the server-side ones (upstream proxy's defaults)."""
        state.client_type = settings.client_type
        out = pb.Settings()
        out.CopyFrom(settings)
        out.request_timeout.FromSeconds(3)
        if settings.WhichOneof("pub_sub") == "publishing":
            state.topics = [t.name for t in settings.publishing.topics]
            out.publishing.max_body_size = self.config.max_message_size
            out.publishing.validate_message_type = True
            out.backoff_policy.CopyFrom(pb.RetryPolicy(max_attempts=3))
            initial, maximum, multiplier = PRODUCER_BACKOFF
            out.backoff_policy.exponential_backoff.initial.FromMilliseconds(int(initial * 1000))
            out.backoff_policy.exponential_backoff.max.FromMilliseconds(int(maximum * 1000))
            out.backoff_policy.exponential_backoff.multiplier = multiplier
        elif settings.WhichOneof("pub_sub") == "subscription":
            sub = settings.subscription
            state.group = sub.group.name
            state.subscriptions = {e.topic.name: e.expression for e in sub.subscriptions}
            sgc = self._group_config(state.group)
            retry_max = sgc.retry_max_times if sgc is not None else self.config.max_reconsume_times
            out.subscription.fifo = any(is_fifo(self._topic_or_none(t)) for t in state.subscriptions)
            out.subscription.receive_batch_size = MAX_BATCH
            if not sub.HasField("long_polling_timeout"):
                out.subscription.long_polling_timeout.FromMilliseconds(
                    self.config.grpc_proxy_long_polling_timeout_mills
                )
            out.backoff_policy.CopyFrom(pb.RetryPolicy(max_attempts=retry_max + 1))
            for seconds in CONSUMER_BACKOFF_S:
                out.backoff_policy.customized_backoff.next.add().FromSeconds(seconds)
        return out

    def _topic_or_none(self, name: str) -> TopicConfig | None:
        return self.c.topic_config_manager.select_topic_config(name)

    def _on_broker_request(self, state: ClientState, request: RemotingCommand) -> None:
        """Broker → client: a transaction check becomes RecoverOrphanedTransactionCommand on Telemetry."""
        if request.code != RequestCode.CHECK_TRANSACTION_STATE or state.telemetry is None or not request.body:
            return
        ext = request.ext_fields
        try:
            msg = decode_record(bytes(request.body))
        except Exception as exc:  # noqa: BLE001 - never let a bad record reach the client
            log.warning("cannot decode a transaction check record", error=str(exc))
            return
        topic = msg.properties.get(MessageConst.REAL_TOPIC) or msg.topic
        tx_id = transaction_id(ext.get("offsetMsgId") or msg.msg_id, int(ext.get("tranStateTableOffset", "0")))
        message = to_message(msg, topic, receipt_handle="", attempt=1, invisible_ms=0)
        message.system_properties.message_type = pb.TRANSACTION
        state.telemetry.put_nowait(
            spb.TelemetryCommand(
                status=OK,
                recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                    message=message, transaction_id=tx_id
                ),
            )
        )
