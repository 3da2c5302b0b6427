"""What every part of the 5.x service shares: status values, the 4.x→5.x code mapping, the client state,
the call errors, the plumbing base class, and small helpers on topics, groups and transaction ids."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
import structlog

from broker.message_const import MessageConst
from broker.topic import MESSAGE_TYPE_ATTRIBUTE, TopicConfig, check_topic_name
from proxy.channel import ProxyChannel
from proxy.convert import BadMessage
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand

if TYPE_CHECKING:
    from broker.controller import BrokerController
    from proxy.auth import GrpcAccessChecker


log = structlog.get_logger(__name__)

CLIENT_ID_KEY = "x-mq-client-id"
DEFAULT_INVISIBLE_MS = 30_000
MIN_INVISIBLE_MS = 1_000  # upstream's minInvisibleTimeMillsForRecv... 10 s; the clients' own checks allow less
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_BATCH = 32
MAX_ASSIGNMENTS = 8  # queues a QueryAssignment hands out (proxy/route.py): receives a push consumer keeps in flight
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


def code_of(response_code: int) -> int:
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


class ServiceBase:
    """State and plumbing the method groups (route, session, send, consume) share through ``self``."""

    def __init__(self, controller: BrokerController) -> None:
        self.c = controller
        self.config = controller.config
        self.clients: dict[str, ClientState] = {}
        self._round_robin = 0
        # None when aclEnable is false: the calls then pay nothing for ACL, and a start imports none of it
        self.acl: GrpcAccessChecker | None = None
        if getattr(controller, "acl", None) is not None:
            from proxy.auth import GrpcAccessChecker

            self.acl = GrpcAccessChecker(controller.acl)

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
            peer = peer_addr(context.peer())
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

    # -- the guard every unary method runs under --------------------------------------------------------------
    def _authorise(self, request, context) -> None:
        """With ACL on, refuse (UNAUTHORIZED in the response's Status) a call its credentials do not allow."""
        if self.acl is not None:
            reason = self.acl.refusal(request, context.invocation_metadata(), peer_addr(context.peer()))
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

    def _on_broker_request(self, state: ClientState, request: RemotingCommand) -> None:  # proxy/session.py
        raise NotImplementedError


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


def is_fifo(tc: TopicConfig | None) -> bool:
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


def peer_addr(peer: str) -> str:
    # grpc peers look like "ipv4:127.0.0.1:53422" or "ipv6:[::1]:53422"
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest
    if kind == "ipv6":
        host, _, port = rest.rpartition(":")
        return f"{host.strip('[]')}:{port}"
    return "0.0.0.0:0"
