"""ACL 1.0 on the 5.x endpoint: the same accounts, permissions and white addresses as the 4.x codes.

A 5.x client signs every call with two metadata entries (apache/rocketmq-clients' ``Signature``):
``x-mq-date-time`` (e.g. ``20261124T151402Z``) and ``authorization``:
``MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1 of the
x-mq-date-time value keyed by the secret key>``. Each request names the resources it needs as upstream 5.x's
``PlainAccessResource.parse(GeneratedMessageV3, AuthenticationHeader)`` does (SendMessage PUB on its topic;
Receive/Ack/ChangeInvisibleDuration/QueryAssignment/ForwardToDLQ SUB on the topic and the group's retry topic;
QueryRoute ANY on the topic; a consumer's Heartbeat SUB on its group; a Telemetry settings command PUB or SUB
on what it publishes or subscribes). The broker's :class:`PlainPermissionManager` then decides, exactly as for
a 4.x request. A refusal is answered in the response's ``Status`` with ``UNAUTHORIZED`` (40100), as upstream's
``ResponseBuilder`` answers an ACL exception.

The remoting requests the service then dispatches into the broker (on a ``ProxyChannel``, which no 4.x
connection can be) were authorised by this check and are let through by the broker's hook: see
``PlainAccessValidator``.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterable
from hashlib import sha1
from typing import Any

import structlog

from broker.acl.account import retry_topic
from broker.acl.errors import FRAME_PARSE, AclError
from broker.acl.permission import ANY, PUB, SUB
from broker.acl.permission_manager import AccessRequest, PlainPermissionManager
from broker.acl.remote_address import host_of
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb
from remoting.codes import RequestCode

log = structlog.get_logger(__name__)

AUTHORIZATION_KEY = "authorization"
DATE_TIME_KEY = "x-mq-date-time"
SESSION_TOKEN_KEY = "x-mq-session-token"
ALGORITHM = "MQv2-HMAC-SHA1"
_LOG_MAX = 256

# The 4.x code each 5.x request stands for (the permission manager's admin check reads it; none is admin-only).
_CODE_OF = {
    "SendMessageRequest": RequestCode.SEND_MESSAGE,
    "EndTransactionRequest": RequestCode.END_TRANSACTION,
    "HeartbeatRequest": RequestCode.HEART_BEAT,
    "NotifyClientTerminationRequest": RequestCode.UNREGISTER_CLIENT,
    "QueryRouteRequest": RequestCode.GET_ROUTEINFO_BY_TOPIC,
}


def parse_authorization(value: str) -> tuple[str, str]:
    """(access key, signature) of an ``authorization`` value; :class:`AclError` when it is malformed."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AclError(f"authorization algorithm {algorithm[:_LOG_MAX]!r} is not {ALGORITHM}", FRAME_PARSE)
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, val = part.strip().partition("=")
        if sep:
            fields[key] = val.strip()
    credential = fields.get("Credential")
    signature = fields.get("Signature")
    if credential is None or signature is None:
        raise AclError("authorization has no Credential or no Signature", FRAME_PARSE)
    return credential.split("/", 1)[0], signature


def sign(secret_key: str, date_time: str) -> str:
    """The client's signature: hex HMAC-SHA1 of the ``x-mq-date-time`` value keyed by the secret key."""
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), sha1).hexdigest()


def signed_metadata(
    access_key: str, secret_key: str, now: time.struct_time | None = None
) -> tuple[tuple[str, str], ...]:
    """The two metadata entries a 5.x client adds to sign a call (for our own tools, e.g. mqbench)."""
    date_time = time.strftime("%Y%m%dT%H%M%SZ", now or time.gmtime())
    authorization = (
        f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME_KEY}, Signature={sign(secret_key, date_time)}"
    )
    return (DATE_TIME_KEY, date_time), (AUTHORIZATION_KEY, authorization)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")


def access_request(request: Any, metadata: Iterable[tuple[str, Any]], peer_addr: str | None) -> AccessRequest:
    """What one 5.x request asks for, with its credentials (J ``PlainAccessResource.parse`` for gRPC)."""
    entries = {key: _text(value) for key, value in metadata or ()}
    access = AccessRequest(
        code=_CODE_OF.get(type(request).__name__, RequestCode.PULL_MESSAGE), remote_host=host_of(peer_addr)
    )
    authorization = entries.get(AUTHORIZATION_KEY)
    if authorization is not None:
        access.access_key, signature = parse_authorization(authorization)
        access.access_key = access.access_key or None  # the client sends an empty Credential without credentials
        date_time = entries.get(DATE_TIME_KEY, "")
        # upstream turns the hex into base64 before comparing: any letter case of the hex is the same signature
        access.signature = signature.lower()
        access.signature_for = lambda secret: sign(secret, date_time)
    access.security_token = entries.get(SESSION_TOKEN_KEY)
    _add_resources(access, request)
    return access


def _topic(access: AccessRequest, resource: pb.Resource, perm: int) -> None:
    access.need(resource.name, perm)


def _group(access: AccessRequest, resource: pb.Resource) -> None:
    access.need(retry_topic(resource.name), SUB)


def _add_resources(access: AccessRequest, request: Any) -> None:
    if isinstance(request, spb.SendMessageRequest):
        if not request.messages:
            raise AclError("SendMessageRequest, messageCount is zero", FRAME_PARSE)
        topic = request.messages[0].topic.name
        if any(m.topic.name != topic for m in request.messages):
            raise AclError("SendMessageRequest, messages' topic is not consistent", FRAME_PARSE)
        access.need(topic, PUB)
    elif isinstance(request, spb.ReceiveMessageRequest):
        _group(access, request.group)
        _topic(access, request.message_queue.topic, SUB)
    elif isinstance(
        request,
        (
            spb.AckMessageRequest,
            spb.ChangeInvisibleDurationRequest,
            spb.ForwardMessageToDeadLetterQueueRequest,
            spb.QueryAssignmentRequest,
        ),
    ):
        _group(access, request.group)
        _topic(access, request.topic, SUB)
    elif isinstance(request, spb.EndTransactionRequest):
        _topic(access, request.topic, PUB)
    elif isinstance(request, spb.HeartbeatRequest):
        if request.client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
            if not request.HasField("group"):
                raise AclError("Consumer heartbeat doesn't have group", FRAME_PARSE)
            _group(access, request.group)
    elif isinstance(request, spb.NotifyClientTerminationRequest):
        if request.group.name.strip():
            _group(access, request.group)
    elif isinstance(request, spb.QueryRouteRequest):
        _topic(access, request.topic, ANY)
    elif isinstance(request, spb.TelemetryCommand) and request.WhichOneof("command") == "settings":
        settings = request.settings
        kind = settings.WhichOneof("pub_sub")
        if kind == "publishing":
            for topic in settings.publishing.topics:
                _topic(access, topic, PUB)
        elif kind == "subscription":
            _group(access, settings.subscription.group)
            for entry in settings.subscription.subscriptions:
                _topic(access, entry.topic, SUB)
        else:
            raise AclError("settings command doesn't have publishing or subscription", FRAME_PARSE)


class GrpcAccessChecker:
    """Checks each 5.x request against the broker's ACL accounts; made only when ``aclEnable`` is true."""

    def __init__(self, manager: PlainPermissionManager) -> None:
        self.manager = manager

    def refusal(self, request: Any, metadata: Iterable[tuple[str, Any]], peer_addr: str | None) -> str | None:
        """None when the request may go on, else the reason it is refused (logged once at warning level)."""
        access_key = None
        try:
            access = access_request(request, metadata, peer_addr)
            access_key = access.access_key
            self.manager.validate(access)
        except AclError as exc:
            log.warning(
                "grpc request refused by acl",
                request=type(request).__name__,
                remote=peer_addr,
                access_key=access_key[:_LOG_MAX] if access_key else access_key,
                reason=exc.message[:_LOG_MAX],
            )
            return exc.message
        return None
