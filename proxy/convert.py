"""Messages between the 5.x wire (protobuf ``Message``) and the broker's 4.x properties and records.

A 5.x message's system properties map onto the property names a 4.x client writes (``TAGS``, ``KEYS``,
``UNIQ_KEY``...), so one stored record reads the same from both protocols.
"""

from __future__ import annotations

import zlib

from broker.message_const import MessageConst
from proxy.protocol import definition_pb2 as pb
from store.message import MessageExt

# 5.x names of the properties that have no 4.x spelling (upstream MessageConst, 5.x).
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"  # the message group of a FIFO message
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"  # the due time the broker's timer delivered a message at
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_MESSAGE_TYPE = "__MESSAGE_TYPE"  # ours: how a 5.x producer labelled the message

SYSTEM_PROPERTY_NAMES = frozenset(
    {
        MessageConst.TAGS,
        MessageConst.KEYS,
        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        MessageConst.WAIT,
        MessageConst.DELAY,
        MessageConst.RETRY_TOPIC,
        MessageConst.REAL_TOPIC,
        MessageConst.REAL_QID,
        MessageConst.TRAN_MSG,
        MessageConst.PRODUCER_GROUP,
        MessageConst.MIN_OFFSET,
        MessageConst.MAX_OFFSET,
        MessageConst.ORIGIN_MESSAGE_ID,
        MessageConst.RECONSUME_TIME,
        MessageConst.MSG_REGION,
        MessageConst.TRACE_SWITCH,
        MessageConst.MAX_RECONSUME_TIMES,
        MessageConst.CLUSTER,
        MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET,
        MessageConst.TRANSACTION_CHECK_TIMES,
        MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS,
        MessageConst.CONSUME_START_TIMESTAMP,
        PROPERTY_SHARDING_KEY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_OUT_MS,
        PROPERTY_TRANSACTION_ID,
        PROPERTY_MESSAGE_TYPE,
    }
)


class BadMessage(ValueError):
    """A 5.x message the broker refuses; carries the 5.x status code."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


def to_properties(message: pb.Message) -> dict[str, str]:
    """The 4.x properties of a 5.x message (user properties first, system ones win)."""
    sp = message.system_properties
    props: dict[str, str] = {}
    for key, value in message.user_properties.items():
        if key in SYSTEM_PROPERTY_NAMES:
            raise BadMessage(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property key {key!r} is reserved by the system")
        props[key] = value
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag:
            raise BadMessage(pb.ILLEGAL_MESSAGE_TAG, f"message tag {sp.tag!r} is blank or contains '|'")
        props[MessageConst.TAGS] = sp.tag
    if sp.keys:
        for key in sp.keys:
            if not key.strip():
                raise BadMessage(pb.ILLEGAL_MESSAGE_KEY, "message keys must not be blank")
        props[MessageConst.KEYS] = " ".join(sp.keys)
    if not sp.message_id:
        raise BadMessage(pb.ILLEGAL_MESSAGE_ID, "the message has no message_id")
    props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    if sp.HasField("message_group"):
        if not sp.message_group:
            raise BadMessage(pb.ILLEGAL_MESSAGE_GROUP, "message group must not be empty")
        props[PROPERTY_SHARDING_KEY] = sp.message_group
    if sp.message_type:
        props[PROPERTY_MESSAGE_TYPE] = pb.MessageType.Name(sp.message_type)
    props[MessageConst.WAIT] = "true"
    return props


def to_message(
    msg: MessageExt, topic: str, *, receipt_handle: str, attempt: int, invisible_ms: int, namespace: str = ""
) -> pb.Message:
    """A stored record as a 5.x client receives it from ReceiveMessage."""
    props = msg.properties
    out = pb.Message()
    out.topic.name = topic
    out.topic.resource_namespace = namespace
    out.body = msg.body
    for key, value in props.items():
        if key not in SYSTEM_PROPERTY_NAMES:
            out.user_properties[key] = value
    sp = out.system_properties
    tags = props.get(MessageConst.TAGS)
    if tags:
        sp.tag = tags
    keys = props.get(MessageConst.KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(" ") if k)
    sp.message_id = props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
    sp.body_digest.type = pb.CRC32
    sp.body_digest.checksum = format(zlib.crc32(msg.body) & 0xFFFFFFFF, "08X")
    sp.body_encoding = pb.IDENTITY
    group = props.get(PROPERTY_SHARDING_KEY)
    if group:
        sp.message_group = group
        sp.message_type = pb.FIFO
    elif props.get(MessageConst.TRAN_MSG) == "true":
        sp.message_type = pb.TRANSACTION
    elif props.get(PROPERTY_MESSAGE_TYPE) == "DELAY":
        sp.message_type = pb.DELAY
    else:
        sp.message_type = pb.NORMAL
    due = props.get(PROPERTY_TIMER_OUT_MS) or props.get(PROPERTY_TIMER_DELIVER_MS)
    if due and due.isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(due))
    sp.born_timestamp.FromMilliseconds(msg.born_timestamp)
    sp.born_host = f"{msg.born_host[0]}:{msg.born_host[1]}"
    sp.store_timestamp.FromMilliseconds(msg.store_timestamp)
    sp.store_host = f"{msg.store_host[0]}:{msg.store_host[1]}"
    sp.receipt_handle = receipt_handle
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    sp.delivery_attempt = attempt
    return out
