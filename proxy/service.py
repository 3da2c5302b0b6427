"""MessagingService: the ``apache.rocketmq.v2`` methods 5.x clients call, translated to the broker's own paths.

Sends, heartbeats, end-transactions and dead-letter forwards become the remoting requests a 4.x client
would send and go through the broker's dispatch table (same processors, same bounded queues); receive,
ack and change of invisible duration are served by the broker's PopService; routes and assignments come
from the broker's topic table. Errors the 5.x protocol describes (unknown topic, bad receipt handle...)
are answered in the response's ``Status``, as the clients expect; errors of the call itself (no client
id, a request that cannot be understood) end the call with a gRPC status code and a clear message.
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
import orjson
import structlog

from broker.message_const import MessageConst
from broker.pop import InvalidReceiptHandle, PopRequest
from broker.topic import MESSAGE_TYPE_ATTRIBUTE, TopicConfig, check_topic_name, is_readable, is_writeable
from proxy.auth import GrpcAccessChecker
from proxy.channel import ProxyChannel
from proxy.convert import PROPERTY_TIMER_DELIVER_MS, BadMessage, to_message, to_properties
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb
from proxy.protocol import service_pb2_grpc
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import EndTransactionRequestHeader, encode_header
from store.message import TRANSACTION_PREPARED_TYPE, MessageExt, decode_offset_msg_id, decode_record, encode_properties

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

CLIENT_ID_KEY = "x-mq-client-id"
DEFAULT_INVISIBLE_MS = 30_000
MIN_INVISIBLE_MS = 1_000  # upstream's minInvisibleTimeMillsForRecv... 10 s; the clients' own checks allow less
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_BATCH = 32
PRODUCER_BACKOFF = (0.01, 1.0, 2.0)  # initial s, max s, multiplier (upstream proxy's producer backoff)
# The 5.x push consumer's redelivery backoff, upstream's customized one (the 4.x delay levels from 1s).
CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
COMMIT, ROLLBACK = 8, 12


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


OK = status(pb.OK, "OK")

# 4.x response codes → 5.x status codes (upstream proxy's ResponseCode → Code mapping, for what we answer).
_CODE_OF = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
}


def _code_of(response_code: int) -> int:
    return _CODE_OF.get(response_code, pb.INTERNAL_SERVER_ERROR)


@dataclass
class ClientState:
    """What the proxy knows of one 5.x client (by its client id)."""

    channel: ProxyChannel
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    topics: list[str] = field(default_factory=list)
    subscriptions: dict[str, pb.FilterExpression] = field(default_factory=dict)
    telemetry: asyncio.Queue[spb.TelemetryCommand] | None = None


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request message that did not parse (made by the server's decoders instead of raising)."""

    message_type: str
    error: str


class CallError(Exception):
    """Ends the call with a gRPC status code (a malformed call, not a refusal the protocol describes)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller
        self.config = controller.config
        self.clients: dict[str, ClientState] = {}
        self._round_robin = 0
        # None when aclEnable is false: the calls then pay nothing for ACL
        self.acl = GrpcAccessChecker(controller.acl) if getattr(controller, "acl", None) is not None else None

    # -- plumbing ---------------------------------------------------------------------------------
    def _client(self, context: grpc.aio.ServicerContext) -> ClientState:
        client_id = ""
        for key, value in context.invocation_metadata() or ():
            if key == CLIENT_ID_KEY:
                client_id = value if isinstance(value, str) else value.decode("utf-8", "replace")
        if not client_id:
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the request has no '{CLIENT_ID_KEY}' metadata: 5.x clients send their client id",
            )
        state = self.clients.get(client_id)
        if state is None or not state.channel.is_active:  # new, or expired by the broker's housekeeping
            peer = _peer_addr(context.peer())
            channel = ProxyChannel(
                client_id, peer, f"{self.config.broker_ip1}:{self.config.grpc_server_port}", self.c.server.dispatch
            )
            state = self.clients[client_id] = ClientState(channel)
            channel.on_broker_request = lambda request, s=state: self._on_broker_request(s, request)
        return state

    async def _call(self, state: ClientState, request: RemotingCommand) -> RemotingCommand:
        return await state.channel.call(request, self.config.grpc_proxy_long_polling_timeout_mills / 1000 + 10)

    def _topic(self, resource: pb.Resource, *, create: bool = False) -> TopicConfig | None:
        name = resource.name
        reason = check_topic_name(name)
        if reason is not None:
            raise BadMessage(pb.ILLEGAL_TOPIC, f"topic {name!r}: {reason}")
        tcm = self.c.topic_config_manager
        tc = tcm.select_topic_config(name)
        if tc is None and create and self.config.auto_create_topic_enable and not name.startswith("%"):
            self.c._create_topic_for_route(name)
            tc = tcm.select_topic_config(name)
        return tc

    def _group_config(self, group: str):
        return self.c.subscription_group_manager.find_subscription_group_config(group)

    # -- QueryRoute / QueryAssignment -------------------------------------------------------------------
    def _broker(self, endpoints: pb.Endpoints) -> pb.Broker:
        broker = pb.Broker(name=self.config.broker_name, id=0)
        if endpoints.addresses:
            broker.endpoints.CopyFrom(endpoints)
        else:
            broker.endpoints.scheme = pb.IPv4
            broker.endpoints.addresses.add(host=self.config.broker_ip1, port=self.config.grpc_server_port)
        return broker

    async def QueryRoute(self, request: spb.QueryRouteRequest, context) -> spb.QueryRouteResponse:
        return await self._guard(context, self._query_route, request, spb.QueryRouteResponse)

    async def _query_route(self, request, context) -> spb.QueryRouteResponse:
        self._client(context)
        tc = self._topic(request.topic, create=True)
        if tc is None:
            return spb.QueryRouteResponse(
                status=status(pb.TOPIC_NOT_FOUND, f"topic {request.topic.name} does not exist")
            )
        broker = self._broker(request.endpoints)
        kinds = topic_message_types(tc)
        response = spb.QueryRouteResponse(status=OK)
        for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
            readable = qid < tc.read_queue_nums and is_readable(tc.perm)
            writeable = qid < tc.write_queue_nums and is_writeable(tc.perm)
            perm = {(True, True): pb.READ_WRITE, (True, False): pb.READ, (False, True): pb.WRITE}.get(
                (readable, writeable), pb.NONE
            )
            response.message_queues.add(
                topic=request.topic, id=qid, permission=perm, broker=broker, accept_message_types=kinds
            )
        return response

    async def QueryAssignment(self, request, context) -> spb.QueryAssignmentResponse:
        return await self._guard(context, self._query_assignment, request, spb.QueryAssignmentResponse)

    async def _query_assignment(self, request, context) -> spb.QueryAssignmentResponse:
        self._client(context)
        tc = self._topic(request.topic)
        if tc is None:
            return spb.QueryAssignmentResponse(
                status=status(pb.TOPIC_NOT_FOUND, f"topic {request.topic.name} does not exist")
            )
        if self._group_config(request.group.name) is None:
            return spb.QueryAssignmentResponse(
                status=status(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {request.group.name} does not exist")
            )
        # POP: the broker serves the whole topic; queue id -1 means "any queue of this broker".
        response = spb.QueryAssignmentResponse(status=OK)
        response.assignments.add().message_queue.CopyFrom(
            pb.MessageQueue(
                topic=request.topic,
                id=-1,
                permission=pb.READ_WRITE,
                broker=self._broker(request.endpoints),
                accept_message_types=topic_message_types(tc),
            )
        )
        return response

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
            return spb.HeartbeatResponse(status=status(_code_of(response.code), response.remark or ""))
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
            out.subscription.fifo = any(_is_fifo(self._topic_or_none(t)) for t in state.subscriptions)
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

    # -- SendMessage / EndTransaction --------------------------------------------------------------------------
    async def SendMessage(self, request, context) -> spb.SendMessageResponse:
        return await self._guard(context, self._send_message, request, spb.SendMessageResponse)

    async def _send_message(self, request: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        state = self._client(context)
        if not request.messages:
            return spb.SendMessageResponse(status=status(pb.BAD_REQUEST, "the request carries no message"))
        response = spb.SendMessageResponse()
        for message in request.messages:
            try:
                entry = await self._send_one(state, message)
            except BadMessage as exc:
                entry = spb.SendResultEntry(status=status(exc.code, str(exc)))
            response.entries.append(entry)
        codes = {e.status.code for e in response.entries}
        response.status.CopyFrom(
            response.entries[0].status
            if len(codes) == 1
            else status(pb.MULTIPLE_RESULTS, "the messages have different results")
        )
        return response

    async def _send_one(self, state: ClientState, message: pb.Message) -> spb.SendResultEntry:
        tc = self._topic(message.topic, create=True)
        if tc is None:
            raise BadMessage(pb.TOPIC_NOT_FOUND, f"topic {message.topic.name} does not exist")
        if not message.body:
            raise BadMessage(pb.MESSAGE_BODY_EMPTY, "the message body is empty")
        if len(message.body) > self.config.max_message_size:
            raise BadMessage(
                pb.MESSAGE_BODY_TOO_LARGE,
                f"the message body is {len(message.body)} bytes, more "
                f"than maxMessageSize {self.config.max_message_size}",
            )
        props = to_properties(message)
        sp = message.system_properties
        kind = sp.message_type or pb.NORMAL
        accepted = topic_message_types(tc)
        if kind not in accepted:
            raise BadMessage(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"topic {tc.topic_name} accepts {'/'.join(pb.MessageType.Name(k) for k in accepted)} "
                f"messages, not {pb.MessageType.Name(kind)}",
            )
        sys_flag = 0
        group = producer_group(tc.topic_name)
        if kind == pb.TRANSACTION:
            props[MessageConst.TRAN_MSG] = "true"
            props[MessageConst.PRODUCER_GROUP] = group
            sys_flag |= TRANSACTION_PREPARED_TYPE
        if sp.HasField("delivery_timestamp"):
            # exact, as 5.x brokers: the send processor parks it in the timer topic (broker/timer.py)
            props[PROPERTY_TIMER_DELIVER_MS] = str(sp.delivery_timestamp.ToMilliseconds())
        if sp.HasField("message_group"):
            queue_id = zlib.crc32(sp.message_group.encode()) % max(tc.write_queue_nums, 1)
        else:
            self._round_robin += 1
            queue_id = self._round_robin % max(tc.write_queue_nums, 1)
        ext = {
            "producerGroup": group,
            "topic": tc.topic_name,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": str(queue_id),
            "sysFlag": str(sys_flag),
            "bornTimestamp": str(int(time.time() * 1000)),
            "flag": "0",
            "properties": encode_properties(props),
            "reconsumeTimes": "0",
            "unitMode": "false",
            "batch": "false",
        }
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, bytes(message.body))
        request.language = "PYTHON"
        response = await self._call(state, request)
        if response.code != ResponseCode.SUCCESS:
            return spb.SendResultEntry(status=status(_code_of(response.code), response.remark or ""))
        rext = response.ext_fields
        entry = spb.SendResultEntry(status=OK, message_id=sp.message_id, offset=int(rext.get("queueOffset", "0")))
        if kind == pb.TRANSACTION:
            entry.transaction_id = transaction_id(rext.get("msgId", ""), int(rext.get("queueOffset", "0")))
        return entry

    async def EndTransaction(self, request, context) -> spb.EndTransactionResponse:
        return await self._guard(context, self._end_transaction, request, spb.EndTransactionResponse)

    async def _end_transaction(self, request: spb.EndTransactionRequest, context) -> spb.EndTransactionResponse:
        state = self._client(context)
        try:
            offset_msg_id, queue_offset = parse_transaction_id(request.transaction_id)
            _, _, commit_log_offset = decode_offset_msg_id(offset_msg_id)
        except ValueError as exc:
            return spb.EndTransactionResponse(status=status(pb.INVALID_TRANSACTION_ID, str(exc)))
        if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
            return spb.EndTransactionResponse(status=status(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK"))
        hdr = EndTransactionRequestHeader(
            producer_group=producer_group(request.topic.name),
            tran_state_table_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=COMMIT if request.resolution == pb.COMMIT else ROLLBACK,
            msg_id=offset_msg_id,
            from_transaction_check=request.source == pb.SOURCE_SERVER_CHECK,
            transaction_id=request.transaction_id,
        )
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, encode_header(hdr))
        response = await self._call(state, cmd)
        if response.code != ResponseCode.SUCCESS:
            return spb.EndTransactionResponse(status=status(_code_of(response.code), response.remark or ""))
        return spb.EndTransactionResponse(status=OK)

    # -- ReceiveMessage / AckMessage / ChangeInvisibleDuration / DLQ ----------------------------------------------
    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            responses = await self._receive(request, context)
        except CallError as exc:
            await context.abort(exc.code, str(exc))
            return
        except BadMessage as exc:
            responses = [spb.ReceiveMessageResponse(status=status(exc.code, str(exc)))]
        for response in responses:
            yield response

    async def _receive(self, request: spb.ReceiveMessageRequest, context) -> list[spb.ReceiveMessageResponse]:
        self._authorise(request, context)
        state = self._client(context)
        group = request.group.name
        if not group:
            raise BadMessage(pb.ILLEGAL_CONSUMER_GROUP, "the request names no consumer group")
        tc = self._topic(request.message_queue.topic)
        if tc is None:
            raise BadMessage(pb.TOPIC_NOT_FOUND, f"topic {request.message_queue.topic.name} does not exist")
        sgc = self._group_config(group)
        if sgc is None:
            raise BadMessage(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group} does not exist")
        if not sgc.consume_enable:
            raise BadMessage(pb.FORBIDDEN, f"consumer group {group} may not consume")
        invisible_ms = (
            request.invisible_duration.ToMilliseconds()
            if request.HasField("invisible_duration")
            else DEFAULT_INVISIBLE_MS
        )
        if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
            raise BadMessage(
                pb.ILLEGAL_INVISIBLE_TIME,
                f"invisible duration {invisible_ms} ms is outside [{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}] ms",
            )
        if request.batch_size < 0 or request.batch_size > MAX_BATCH:
            raise BadMessage(pb.BAD_REQUEST, f"batch size {request.batch_size} is outside [1, {MAX_BATCH}]")
        matches = self._matcher(request.filter_expression)
        poll_ms = (
            request.long_polling_timeout.ToMilliseconds()
            if request.HasField("long_polling_timeout")
            else self.config.grpc_proxy_long_polling_timeout_mills
        )
        poll_ms = max(0, min(poll_ms, self.config.grpc_proxy_long_polling_timeout_mills))
        # The request names a queue of the route (clients pick one per receive), but this broker pops from
        # all of the topic's queues, as upstream's proxy pops from the whole broker the queue belongs to.
        queue_ids = list(range(tc.read_queue_nums))
        random.shuffle(queue_ids)
        if state.group != group:
            state.group = group
        pop = PopRequest(
            group=group,
            topic=tc.topic_name,
            queue_ids=queue_ids,
            max_nums=request.batch_size or 1,
            invisible_ms=invisible_ms,
            fifo=_is_fifo(tc),
            max_attempts=sgc.retry_max_times + 1,
            matches=matches,
        )
        deadline = time.monotonic() + poll_ms / 1000
        popped = await self.c.pop_service.pop(pop)
        while not popped:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return [spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))]
            await self.c.pop_service.wait(group, tc.topic_name, int(remaining * 1000))
            popped = await self.c.pop_service.pop(pop)
        out = [spb.ReceiveMessageResponse(status=OK)]
        # when the broker handed the messages over (clients measure their delivery latency from it)
        delivered = spb.ReceiveMessageResponse()
        delivered.delivery_timestamp.GetCurrentTime()
        out.append(delivered)
        for p in popped:
            out.append(
                spb.ReceiveMessageResponse(
                    message=to_message(
                        p.message,
                        tc.topic_name,
                        receipt_handle=p.receipt_handle,
                        attempt=p.attempt,
                        invisible_ms=p.invisible_ms,
                        namespace=request.message_queue.topic.resource_namespace,
                    )
                )
            )
        return out

    def _matcher(self, expression: pb.FilterExpression):
        """TAG (``*`` or ``a||b``) or, with enablePropertyFilter, SQL92 over the message's properties."""
        if expression.type != pb.SQL:
            return tag_matcher(expression)
        if not self.config.enable_property_filter:
            raise BadMessage(
                pb.ILLEGAL_FILTER_EXPRESSION, "SQL92 filtering is disabled on this broker (enablePropertyFilter=false)"
            )
        try:
            predicate = self.c.compile_expression("SQL92", expression.expression)
        except ValueError as exc:
            raise BadMessage(pb.ILLEGAL_FILTER_EXPRESSION, f"SQL92 filter {expression.expression!r}: {exc}") from None
        return lambda msg: bool(predicate(msg.properties))

    async def AckMessage(self, request, context) -> spb.AckMessageResponse:
        return await self._guard(context, self._ack, request, spb.AckMessageResponse)

    async def _ack(self, request: spb.AckMessageRequest, context) -> spb.AckMessageResponse:
        self._client(context)
        response = spb.AckMessageResponse()
        for entry in request.entries:
            try:
                self.c.pop_service.ack(request.group.name, request.topic.name, entry.receipt_handle)
                st = OK
            except InvalidReceiptHandle as exc:
                st = status(pb.INVALID_RECEIPT_HANDLE, str(exc))
            response.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st)
        codes = {e.status.code for e in response.entries}
        response.status.CopyFrom(
            OK
            if codes <= {pb.OK}
            else response.entries[0].status
            if len(codes) == 1
            else status(pb.MULTIPLE_RESULTS, "the entries have different results")
        )
        return response

    async def ChangeInvisibleDuration(self, request, context) -> spb.ChangeInvisibleDurationResponse:
        return await self._guard(context, self._change_invisible, request, spb.ChangeInvisibleDurationResponse)

    async def _change_invisible(
        self, request: spb.ChangeInvisibleDurationRequest, context
    ) -> spb.ChangeInvisibleDurationResponse:
        self._client(context)
        invisible_ms = request.invisible_duration.ToMilliseconds()
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            return spb.ChangeInvisibleDurationResponse(
                status=status(
                    pb.ILLEGAL_INVISIBLE_TIME,
                    f"invisible duration {invisible_ms} ms is outside [0, {MAX_INVISIBLE_MS}]",
                )
            )
        try:
            handle = self.c.pop_service.change_invisible_time(
                request.group.name, request.topic.name, request.receipt_handle, invisible_ms
            )
        except InvalidReceiptHandle as exc:
            return spb.ChangeInvisibleDurationResponse(status=status(pb.INVALID_RECEIPT_HANDLE, str(exc)))
        return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    async def ForwardMessageToDeadLetterQueue(self, request, context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return await self._guard(context, self._forward_to_dlq, request, spb.ForwardMessageToDeadLetterQueueResponse)

    async def _forward_to_dlq(self, request, context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        state = self._client(context)
        group, topic = request.group.name, request.topic.name
        try:
            msg, _ = self.c.pop_service.message_of(group, topic, request.receipt_handle)
        except InvalidReceiptHandle as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.INVALID_RECEIPT_HANDLE, str(exc)))
        if msg is None:
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(pb.MESSAGE_NOT_FOUND, "the message is no longer stored")
            )
        if not await self.send_to_dlq(state.channel, group, msg):
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(pb.INTERNAL_SERVER_ERROR, "the dead letter queue refused it")
            )
        self.c.pop_service.ack(group, topic, request.receipt_handle)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)

    async def send_to_dlq(self, channel: ProxyChannel, group: str, msg: MessageExt) -> bool:
        """CONSUMER_SEND_MSG_BACK with delay level -1 (straight to %DLQ%<group>) through the send queue."""
        ext = {
            "offset": str(msg.commit_log_offset),
            "group": group,
            "delayLevel": "-1",
            "originMsgId": msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, msg.msg_id),
            "originTopic": msg.topic,
            "unitMode": "false",
            "maxReconsumeTimes": "0",
        }
        response = await channel.call(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext), 10.0)
        if response.code != ResponseCode.SUCCESS:
            log.warning(
                "cannot move a message to the dead letter queue",
                group=group,
                topic=msg.topic,
                code=response.code,
                remark=response.remark,
            )
        return response.code == ResponseCode.SUCCESS

    # -- the guard every unary method runs under --------------------------------------------------------------
    def _authorise(self, request, context) -> None:
        """With ACL on, refuse (UNAUTHORIZED in the response's Status) a call its credentials do not allow."""
        if self.acl is not None:
            reason = self.acl.refusal(request, context.invocation_metadata(), _peer_addr(context.peer()))
            if reason is not None:
                raise BadMessage(pb.UNAUTHORIZED, reason)

    async def _guard(self, context, fn, request, response_type):
        try:
            self._authorise(request, context)
            return await fn(request, context)
        except CallError as exc:
            log.warning("grpc call refused", method=fn.__name__.lstrip("_"), reason=str(exc), peer=context.peer())
            await context.abort(exc.code, str(exc))
        except BadMessage as exc:
            return response_type(status=status(exc.code, str(exc)))
        except TimeoutError:
            return response_type(status=status(pb.PROXY_TIMEOUT, "the broker did not answer in time"))


# -- helpers -------------------------------------------------------------------------------------------------
_TYPE_OF = {
    "NORMAL": [pb.NORMAL],
    "FIFO": [pb.FIFO],
    "DELAY": [pb.DELAY],
    "TRANSACTION": [pb.TRANSACTION],
    "MIXED": [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}


def topic_message_types(tc: TopicConfig | None) -> list[int]:
    """The message types a topic accepts (its ``message.type`` attribute, as 5.x brokers keep it)."""
    if tc is None:
        return [pb.NORMAL]
    attrs = tc.attributes
    return _TYPE_OF.get(attrs.get(MESSAGE_TYPE_ATTRIBUTE, "NORMAL").upper(), [pb.NORMAL])


def _is_fifo(tc: TopicConfig | None) -> bool:
    return tc is not None and pb.FIFO in topic_message_types(tc) and len(topic_message_types(tc)) == 1


def producer_group(topic: str) -> str:
    """5.x producers have no group; transactions need one for check-backs, so a topic names one."""
    return f"PROXY_PRODUCER_{topic}"


def transaction_id(offset_msg_id: str, queue_offset: int) -> str:
    return f"{offset_msg_id}-{queue_offset}"


def parse_transaction_id(text: str) -> tuple[str, int]:
    msg_id, sep, offset = text.rpartition("-")
    if not sep or not msg_id or not offset.isdigit():
        raise ValueError(f"transaction id {text[:80]!r} was not issued by this broker")
    return msg_id, int(offset)


def tag_matcher(expression: pb.FilterExpression):
    text = (expression.expression or "*").strip()
    if text in ("", "*"):
        return lambda msg: True
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    return lambda msg: msg.properties.get(MessageConst.TAGS) in tags


def _peer_addr(peer: str) -> str:
    # grpc peers look like "ipv4:127.0.0.1:53422" or "ipv6:[::1]:53422"
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest
    if kind == "ipv6":
        host, _, port = rest.rpartition(":")
        return f"{host.strip('[]')}:{port}"
    return "0.0.0.0:0"
