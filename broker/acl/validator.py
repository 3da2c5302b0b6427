"""The broker's ACL hook: what each request needs (J ``PlainAccessValidator.parse``) and the check before its
processor runs (J ``BrokerController.initialAcl``'s RPC hook).

Resources per code follow 4.9.7, quirks included (SEND_MESSAGE reads a ``group`` field its header never has,
SEND_MESSAGE_V2 asks SUB on the producer group's retry topic for a retry send). One deliberate difference:
SEND_BATCH_MESSAGE (320), which 4.9.7 lets any signed account send to any topic, needs PUB on its topic as
SEND_MESSAGE_V2 does. A refusal is answered SYSTEM_ERROR with upstream's remark (see :mod:`broker.acl.errors`)
and logged once at warning level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import structlog

from broker.acl.account import is_retry_topic, retry_topic
from broker.acl.errors import FRAME_PARSE, AclError
from broker.acl.permission import PUB, SUB
from broker.acl.permission_manager import AccessRequest, PlainPermissionManager
from broker.acl.remote_address import host_of
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.signature import ACCESS_KEY, SECURITY_TOKEN, SIGNATURE, UNIQUE_MSG_QUERY_FLAG, request_signature

log = structlog.get_logger(__name__)

_C = RequestCode
_UNSIGNED = (SIGNATURE, UNIQUE_MSG_QUERY_FLAG)  # the fields the broker leaves out of the signed content
_LOG_MAX = 256  # a client chooses its access key: a log line must not carry megabytes of it


def parse_access(request: RemotingCommand, remote_addr: str | None) -> AccessRequest:
    """The access key, signature and resources one request asks for."""
    access = AccessRequest(code=request.code, remote_host=host_of(remote_addr))
    ext = request.ext_fields
    if not ext:
        return access
    access.access_key = ext.get(ACCESS_KEY)
    access.signature = ext.get(SIGNATURE)
    access.security_token = ext.get(SECURITY_TOKEN)
    try:
        _add_resources(access, request, ext)
    except AclError:
        raise
    except Exception as exc:  # noqa: BLE001 - a client's malformed header or body, refused like upstream
        raise AclError(f"{type(exc).__name__}: {exc}", FRAME_PARSE) from None
    access.signature_for = lambda secret: request_signature(ext, request.body, secret, _UNSIGNED)
    return access


def _add_resources(access: AccessRequest, request: RemotingCommand, ext: Mapping[str, str]) -> None:
    code = request.code
    if code == _C.SEND_MESSAGE:
        topic = ext.get("topic")
        if is_retry_topic(topic):
            access.need(retry_topic(ext.get("group")), SUB)
        else:
            access.need(topic, PUB)
    elif code == _C.SEND_MESSAGE_V2 or code == _C.SEND_BATCH_MESSAGE:
        topic, group = (ext.get("b"), ext.get("a")) if "b" in ext else (ext.get("topic"), ext.get("producerGroup"))
        if is_retry_topic(topic):
            access.need(retry_topic(group), SUB)
        else:
            access.need(topic, PUB)
    elif code == _C.CONSUMER_SEND_MSG_BACK:
        access.need(retry_topic(ext.get("group")), SUB)
    elif code == _C.PULL_MESSAGE:
        access.need(ext.get("topic"), SUB)
        access.need(retry_topic(ext.get("consumerGroup")), SUB)
    elif code == _C.QUERY_MESSAGE:
        access.need(ext.get("topic"), SUB)
    elif code == _C.HEART_BEAT:
        for consumer in _list(_json(request.body).get("consumerDataSet")):
            access.need(retry_topic(_str(consumer.get("groupName"))), SUB)
            for subscription in _list(consumer.get("subscriptionDataSet")):
                access.need(_str(subscription.get("topic")), SUB)
    elif code in (_C.UNREGISTER_CLIENT, _C.GET_CONSUMER_LIST_BY_GROUP):
        access.need(retry_topic(ext.get("consumerGroup")), SUB)
    elif code == _C.UPDATE_CONSUMER_OFFSET:
        access.need(retry_topic(ext.get("consumerGroup")), SUB)
        access.need(ext.get("topic"), SUB)


def _json(body: Any) -> Mapping[str, Any]:
    if not body:
        raise AclError("the heartbeat has no body", FRAME_PARSE)
    data = orjson.loads(bytes(body))
    if not isinstance(data, Mapping):
        raise AclError("the heartbeat body is not a JSON object", FRAME_PARSE)
    return data


def _list(value: Any) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise AclError("the heartbeat body has a malformed consumer or subscription list", FRAME_PARSE)
    return value


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


class PlainAccessValidator:
    """The hook ``RemotingServer`` runs before a broker processor when ``aclEnable`` is true."""

    def __init__(self, manager: PlainPermissionManager) -> None:
        self.manager = manager

    def __call__(self, channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        """None to let the request through, else the refusal to answer with."""
        if getattr(channel, "acl_checked_by_proxy", False):
            # The 5.x endpoint checked the gRPC call this request was made from (proxy/auth.py) with the
            # caller's account; only the proxy makes such channels, no 4.x connection can claim to be one.
            return None
        remote = getattr(channel, "remote_addr", None)
        try:
            self.manager.validate(parse_access(request, remote))
        except AclError as exc:
            access_key = request.ext_fields.get(ACCESS_KEY)
            log.warning(
                "request refused by acl",
                code=request.code,
                remote=remote,
                access_key=access_key[:_LOG_MAX] if access_key else access_key,
                reason=exc.message[:_LOG_MAX],
            )
            return request.response(ResponseCode.SYSTEM_ERROR, exc.remark)
        return None
