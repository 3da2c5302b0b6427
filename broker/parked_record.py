"""A parked delay-level record read straight into the message that goes back to its real queue.

The schedule service delivers a burst at the rate it arrived, so the cost per message of turning a
parked CommitLog record into a put matters: `decode_record` + `ScheduleMessageService.restore` build a
`MessageExt` (both hosts through ``inet_ntoa``, the properties parsed in Python) and then a second
message from it, most of a delivery's CPU. `ParkedRecordReader.inner` builds the same
`MessageExtBrokerInner` in one pass over the record's bytes: one unpack of the fixed part, the hosts
and tags codes from small caches, the properties parsed with C-level splits (falling back to
`decode_properties` when the string has pieces J's parser would drop). What it builds equals what
``restore(decode_record(view))`` builds, field for field (tests/broker/test_parked_record.py), so the
crash recovery, which still matches copies through ``restore``, sees the same messages.
"""

from __future__ import annotations

import socket

from broker.message_const import MessageConst
from store.message import (
    BORNHOST_V6_FLAG,
    FIXED_PART,
    FIXED_PART_LENGTH,
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    STOREHOSTADDRESS_V6_FLAG,
    MessageExtBrokerInner,
    RecordError,
    decode_properties,
    record_length,
    tags_hash,
)

_CACHE_MAX = 4096  # hosts and tags remembered (each cache starts over when full)
_JOIN_PAIR = NAME_VALUE_SEPARATOR.join
_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_DELAY = MessageConst.DELAY
_REAL_TOPIC = MessageConst.REAL_TOPIC
_REAL_QID = MessageConst.REAL_QID
_TAGS = MessageConst.TAGS


def parse_properties(text: str) -> dict[str, str]:
    """`decode_properties` (J string2messageProperties) in C-level passes for a well-formed string (one
    NAME_VALUE_SEPARATOR per piece, no empty name or value): split on both separators, names and values
    alternate. Any other string (a separator inside a value, a trailing one, junk) goes to
    `decode_properties` itself."""
    if not text:
        return {}
    parts = text.replace(PROPERTY_SEPARATOR, NAME_VALUE_SEPARATOR).split(NAME_VALUE_SEPARATOR)
    if len(parts) != 2 * text.count(PROPERTY_SEPARATOR) + 2 or "" in parts:
        return decode_properties(text)
    return dict(zip(parts[::2], parts[1::2]))


class ParkedRecordReader:
    """Builds deliveries from parked records; holds the caches of one service (no global state)."""

    def __init__(self) -> None:
        self._hosts: dict[tuple[bytes, int], tuple[str, int]] = {}
        self._tags: dict[str, int] = {}

    def _host(self, ip: bytes, port: int) -> tuple[str, int]:
        key = (ip, port)
        host = self._hosts.get(key)
        if host is None:
            if len(self._hosts) >= _CACHE_MAX:
                self._hosts.clear()
            host = self._hosts[key] = (socket.inet_ntoa(ip), port)
        return host

    def _tags_code(self, tags: str | None) -> int:
        if not tags:
            return 0
        code = self._tags.get(tags)
        if code is None:
            if len(self._tags) >= _CACHE_MAX:
                self._tags.clear()
            code = self._tags[tags] = tags_hash(tags)
        return code

    def inner(self, view: memoryview) -> MessageExtBrokerInner | None:
        """The delivery of the parked record `view` (exactly one record): its real topic and queue,
        ``DELAY`` dropped, the tags code of its own TAGS (``restore``'s result). None when the record
        has no ``REAL_TOPIC`` (put back as it is, it would be parked again). Raises RecordError when
        the bytes are not a consistent record."""
        size = len(view)
        if size < FIXED_PART_LENGTH + 3:
            raise RecordError(f"a record of {size} bytes is shorter than its fixed part")
        (
            total,
            magic,
            _crc,
            _queue_id,
            flag,
            _queue_offset,
            _phy,
            sys_flag,
            born_ts,
            born_ip,
            born_port,
            _store_ts,
            store_ip,
            store_port,
            reconsume,
            prepared,
            body_len,
        ) = FIXED_PART.unpack_from(view)
        if magic != MESSAGE_MAGIC_CODE:
            raise RecordError(f"illegal magic code 0x{magic & 0xFFFFFFFF:08X}")
        if sys_flag & _V6:
            raise RecordError(f"IPv6 host layout (sysFlag 0x{sys_flag:x}) is not supported")
        if total != size or body_len < 0 or FIXED_PART_LENGTH + body_len + 3 > total:
            raise RecordError(f"inconsistent record sizes: total {total} of {size} bytes, body {body_len}")
        pos = FIXED_PART_LENGTH + body_len
        topic_len = view[pos]
        props_at = pos + 3 + topic_len
        if props_at > total:
            raise RecordError(f"inconsistent record sizes: topic of {topic_len} bytes in {total}")
        props_len = (view[props_at - 2] << 8) | view[props_at - 1]
        if props_len & 0x8000 or record_length(body_len, topic_len, props_len) != total:
            raise RecordError(f"record total size {total} does not match its fields")
        text = str(view[props_at:total], "utf-8", "replace") if props_len else ""
        props = parse_properties(text)
        topic = props.get(_REAL_TOPIC)
        if topic is None:
            return None
        props.pop(_DELAY, None)
        try:
            queue_id = int(props.get(_REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        return MessageExtBrokerInner(
            topic,
            queue_id,
            flag,
            bytes(view[FIXED_PART_LENGTH:pos]),
            props,
            PROPERTY_SEPARATOR.join(map(_JOIN_PAIR, props.items())),
            self._tags_code(props.get(_TAGS)),
            sys_flag,
            born_ts,
            self._host(born_ip, born_port),
            self._host(store_ip, store_port),
            reconsume,
            prepared,
        )
