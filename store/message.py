"""Messages as the store sees them and the CommitLog record format (protocol §5).

Owns: `MessageExtBrokerInner` (what the broker hands to the store), `MessageExt` (a decoded record),
`encode_record` (upstream's exact record layout with IPv4 hosts), `decode_record`, the properties string
codec with J's parser semantics and `tags_hash` (J `String.hashCode`). The offset message id helpers live in
`store.message_id` and are re-exported here, where callers have always imported them.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from store.java_hash import java_string_hash
from store.message_id import create_offset_msg_id as create_offset_msg_id
from store.message_id import decode_offset_msg_id as decode_offset_msg_id
from store.message_id import host_to_bytes
from store.message_id import join_offset_msg_ids as join_offset_msg_ids
from store.message_id import offset_msg_id_prefix as offset_msg_id_prefix

try:  # ISA-L's CRC32 is the same IEEE CRC as zlib's, ~4x faster (the CRC is most of a 4 KiB append)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - optional speed-up
    from zlib import crc32

# ---------------------------------------------------------------------------------------------- constants
MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7 as a signed int32
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194 as a signed int32
END_FILE_MIN_BLANK_LENGTH = 4 + 4

NAME_VALUE_SEPARATOR = "\u0001"
PROPERTY_SEPARATOR = "\u0002"
MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767

# record field positions (IPv4 hosts)
POS_TOTAL_SIZE = 0
POS_MAGIC = 4
POS_BODY_CRC = 8
POS_QUEUE_ID = 12
POS_FLAG = 16
POS_QUEUE_OFFSET = 20
POS_PHYSICAL_OFFSET = 28
POS_SYSFLAG = 36
POS_BORN_TIMESTAMP = 40
POS_BORN_HOST = 48
POS_STORE_TIMESTAMP = 56
POS_STORE_HOST = 64
POS_RECONSUME_TIMES = 72
POS_PREPARED_TX_OFFSET = 76
POS_BODY_LENGTH = 84
POS_BODY = 88
FIXED_PART_LENGTH = 88  # everything before the body; a record is 91 + body + topic + properties

# sysflag bits (MessageSysFlag)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
_IPV4_HOSTS = ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)  # records are written with IPv4 hosts only
IPV4_HOSTS_MASK = _IPV4_HOSTS  # (the sys flag of a record as written: for the put path's unrolled writes)


def transaction_value(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_ROLLBACK_TYPE


class MessageConst:
    """Property names (J MessageConst) the store itself reads or writes."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    UNIQ_KEY = "UNIQ_KEY"
    CLUSTER = "CLUSTER"
    KEY_SEPARATOR = " "


RMQ_SYS_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP BORNHOST(ip,port)
# STORETIMESTAMP STOREHOST(ip,port) RECONSUMETIMES PREPAREDTXOFFSET BODYLEN
FIXED_PART = struct.Struct(">iiiiiqqiq4siq4siiqi")
assert FIXED_PART.size == FIXED_PART_LENGTH
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_LONG = struct.Struct(">q")


class RecordError(ValueError):
    """Bytes that are not a valid CommitLog record."""


# -------------------------------------------------------------------------------------------- properties
def encode_properties(properties: Mapping[str, str] | None) -> str:
    """J `messageProperties2String`: `k\\x01v\\x02k\\x01v`, no trailing separator, None values skipped."""
    if not properties:
        return ""
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in properties.items() if v is not None)


def decode_properties(properties: str | None) -> dict[str, str]:
    """J `string2messageProperties`: split on \\x02; keep pieces with a non-empty name and value,
    split at the first \\x01. Trailing separators (C, N, G) and junk pieces are ignored."""
    result: dict[str, str] = {}
    if not properties:
        return result
    for piece in properties.split(PROPERTY_SEPARATOR):
        sep = piece.find(NAME_VALUE_SEPARATOR)
        # J: kvSepIndex > index && kvSepIndex < newIndex - 1  → non-empty key and non-empty value
        if 0 < sep < len(piece) - 1:
            result[piece[:sep]] = piece[sep + 1 :]
    return result


# one for each piece of a properties text (map stops at the shortest iterable: these are never used up)
_WAIT_PIECE = MessageConst.WAIT + NAME_VALUE_SEPARATOR
_CLUSTER_PIECE = MessageConst.CLUSTER + NAME_VALUE_SEPARATOR
_WAIT = MessageConst.WAIT
_CLUSTER = MessageConst.CLUSTER
_UNIQ_KEY = MessageConst.UNIQ_KEY
_UNIQ_HEAD = _UNIQ_KEY + NAME_VALUE_SEPARATOR
_WAIT_TRUE_TAIL = PROPERTY_SEPARATOR + _WAIT_PIECE + "true" + PROPERTY_SEPARATOR
_CLUSTER_TAIL = PROPERTY_SEPARATOR + _CLUSTER_PIECE
_UNIQ_FROM = len(_UNIQ_HEAD)
_UNIQ_TO = -len(_WAIT_TRUE_TAIL)


def split_properties(properties: str | None) -> tuple[dict[str, str], list[str] | None]:
    """`decode_properties`, and the text's pieces (``name\x01value``) when they are exactly the dict's items in
    order: every piece has a non-empty name and value and no name comes twice (what a client sends). The pieces let
    `stored_properties` edit the text instead of encoding the dict again. One split, then a ``partition`` a piece
    (a short loop: faster than ``dict(map(str.split, ...))``, whose method calls with a maxsplit cost more than
    the loop, 1.0 against 1.2 us for the benchmark Producer's two pieces, 1.2 against 2.0 for four); anything
    else (a junk piece, an empty name or value, a name sent twice) gets None and the dict of
    `decode_properties`."""
    if not properties:
        return {}, None
    pieces = properties.split(PROPERTY_SEPARATOR)
    if not pieces[-1]:  # the separator J's client writes after every pair
        pieces.pop()
    props = {}
    for piece in pieces:
        name, _, value = piece.partition(NAME_VALUE_SEPARATOR)
        if not name or not value:  # (no separator: an empty value too)
            return decode_properties(properties), None
        props[name] = value
    if len(props) != len(pieces):  # a name sent twice
        return decode_properties(properties), None
    return props, pieces


def stored_properties(props: dict[str, str], pieces: list[str] | None, cluster: str) -> str:
    """The properties string the broker stores for a sent message (upstream SendMessageProcessor): CLUSTER set to
    `cluster` and WAIT dropped, in `props` and in the returned string. `pieces`: those `split_properties` gave
    with `props`, when `props` has not been changed since (else None). Then the string is the sent pieces with
    the WAIT piece removed and the CLUSTER piece appended, which is what encoding the changed dict writes (its
    items in insertion order; a CLUSTER sent by the client is replaced in its place, so that case encodes)."""
    if pieces is None or MessageConst.CLUSTER in props:
        props[MessageConst.CLUSTER] = cluster
        props.pop(MessageConst.WAIT, None)
        return encode_properties(props)
    wait = props.pop(MessageConst.WAIT, None)
    if wait is not None:
        pieces.remove(_WAIT_PIECE + wait)
    props[MessageConst.CLUSTER] = cluster
    pieces.append(_CLUSTER_PIECE + cluster)
    return PROPERTY_SEPARATOR.join(pieces)


def sent_properties(properties: str | None, cluster: str) -> tuple[dict[str, str], str]:
    """`split_properties` then `stored_properties` in one call, for a sent message whose properties nothing else
    edits in between (the SEND path's common message): the dict (CLUSTER set, WAIT dropped) and the string to
    store. The pieces loop as in `split_properties`; a text it does not take, or one that carries CLUSTER, goes
    the two-step way, to the same dict and string. The Java client's text for a message without tags or keys
    (``UNIQ_KEY\x01<id>\x02WAIT\x01true\x02``: the benchmark Producer's) is taken whole: the same dict and string
    without the loop (0.65 against 1.45 us a call, timeit)."""
    if properties and properties.endswith(_WAIT_TRUE_TAIL) and properties.startswith(_UNIQ_HEAD):
        uniq = properties[_UNIQ_FROM:_UNIQ_TO]
        if uniq and PROPERTY_SEPARATOR not in uniq:
            return {_UNIQ_KEY: uniq, _CLUSTER: cluster}, f"{_UNIQ_HEAD}{uniq}{_CLUSTER_TAIL}{cluster}"
    if properties:
        pieces = properties.split(PROPERTY_SEPARATOR)
        if not pieces[-1]:  # the separator J's client writes after every pair
            pieces.pop()
        props = {}
        for piece in pieces:
            name, _, value = piece.partition(NAME_VALUE_SEPARATOR)
            if not name or not value:
                break
            props[name] = value
        else:
            if len(props) == len(pieces) and _CLUSTER not in props:
                wait = props.pop(_WAIT, None)
                if wait is not None:
                    pieces.remove(_WAIT_PIECE + wait)
                props[_CLUSTER] = cluster
                pieces.append(_CLUSTER_PIECE + cluster)
                return props, PROPERTY_SEPARATOR.join(pieces)
    props, split = split_properties(properties)
    return props, stored_properties(props, split, cluster)


# ----------------------------------------------------------------------------------------------- hashing
def tags_hash(tags: str | None) -> int:
    """Tags code stored in the consume queue: `String.hashCode()` of the whole TAGS value, 0 if none."""
    if not tags:
        return 0
    return java_string_hash(tags)


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """UtilAll.crc32: IEEE CRC32 & 0x7FFFFFFF."""
    return crc32(body) & 0x7FFFFFFF


# ------------------------------------------------------------------------------------------------ models
@dataclass(slots=True)
class MessageExtBrokerInner:
    """A message the broker asks the store to append (upstream MessageExtBrokerInner)."""

    topic: str
    queue_id: int
    flag: int
    body: bytes
    properties: dict[str, str]
    properties_string: str  # serialized form; the store writes this string, not the dict
    tags_code: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_host: tuple[str, int]
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    store_timestamp: int = 0  # set by the store under the append lock

    @classmethod
    def create(
        cls,
        topic: str,
        body: bytes,
        *,
        queue_id: int = 0,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> MessageExtBrokerInner:
        """Build one with `properties_string` and `tags_code` derived from `properties`."""
        props = dict(properties or {})
        return cls(
            topic=topic,
            queue_id=queue_id,
            flag=flag,
            body=body,
            properties=props,
            properties_string=encode_properties(props),
            tags_code=tags_hash(props.get(MessageConst.TAGS)),
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            store_host=store_host,
            reconsume_times=reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
        )

    def set_properties(self, properties: dict[str, str]) -> None:
        """Replace the properties and keep `properties_string`/`tags_code` consistent with them."""
        self.properties = properties
        self.properties_string = encode_properties(properties)
        self.tags_code = tags_hash(properties.get(MessageConst.TAGS))

    @property
    def delay_time_level(self) -> int:
        value = self.properties.get(MessageConst.DELAY)
        try:
            return int(value) if value else 0
        except ValueError:
            return 0


@dataclass(slots=True)
class MessageExt:
    """A decoded CommitLog record (upstream MessageExt as produced by MessageDecoder.decode)."""

    store_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)
    properties_string: str = ""

    @property
    def msg_id(self) -> str:
        """The offset message id (J `MessageExt.msgId` on the broker)."""
        return create_offset_msg_id(self.store_host[0], self.store_host[1], self.commit_log_offset)

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.KEYS)

    @property
    def tags_code(self) -> int:
        return tags_hash(self.tags)

    def to_inner(self) -> MessageExtBrokerInner:
        """A copy ready to be put again (send-back, schedule delivery, transaction commit)."""
        return MessageExtBrokerInner.create(
            self.topic,
            self.body,
            queue_id=self.queue_id,
            properties=self.properties,
            flag=self.flag,
            sys_flag=self.sys_flag,
            born_timestamp=self.born_timestamp,
            born_host=self.born_host,
            store_host=self.store_host,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
        )


# ------------------------------------------------------------------------------------------------ codec
def record_length(body_length: int, topic_length: int, properties_length: int) -> int:
    """CommitLog.calMsgLength for IPv4 hosts."""
    return 91 + body_length + topic_length + properties_length


# `write_many`'s record: FIXED_PART with the born host, store time and store host as one 24-byte field (a batch's
# messages share them), then the body and the tail
_BATCH_RECORD_FIXED = ">iiiiiqqiq24siqi"
_HOSTS_AND_TIME = struct.Struct(">4siq4si")  # born ip, born port, store time, store ip, store port
assert struct.calcsize(_BATCH_RECORD_FIXED) == FIXED_PART_LENGTH
_BATCH_RECORDS_MAX = 64


class RecordEncoder:
    """Encodes records with small caches of host and topic bytes (one per store; not shared state)."""

    _CACHE_MAX = 4096

    def __init__(self) -> None:
        self._hosts: dict[str, bytes] = {}
        self._topics: dict[str, bytes] = {}
        # read-only views of the caches for the put path's unrolled loops (the same dicts, cleared in place):
        # topic → TOPICLEN + topic bytes (only topics `plan` accepted), IPv4 text → 4 bytes
        self.topic_heads = self._topics
        self.host_bytes = self._hosts
        self._batch_records: dict[tuple[int, int], struct.Struct] = {}  # see _batch_record

    def host(self, ip: str) -> bytes:
        """The 4 bytes of an IPv4 host as records carry it (cached)."""
        raw = self._hosts.get(ip)
        if raw is None:
            if len(self._hosts) > self._CACHE_MAX:
                self._hosts.clear()
            raw = self._hosts[ip] = host_to_bytes(ip)
        return raw

    _host = host  # (the name the batch path's code used before)

    def _topic(self, topic: str) -> bytes:
        """TOPICLEN byte + topic bytes."""
        raw = self._topics.get(topic)
        if raw is None:
            data = topic.encode("utf-8")
            if len(data) > MAX_TOPIC_LENGTH:
                raise RecordError(f"MESSAGE_ILLEGAL: topic is {len(data)} bytes, more than {MAX_TOPIC_LENGTH}")
            if len(self._topics) > self._CACHE_MAX:
                self._topics.clear()
            raw = self._topics[topic] = bytes((len(data),)) + data
        return raw

    def plan(self, msg: MessageExtBrokerInner, max_body_size: int | None = None) -> tuple[bytes, int, int]:
        """What can be computed outside the append lock: (tail, body CRC, record size), where tail is
        TOPICLEN + TOPIC + PROPLEN + PROPERTIES (the bytes after the body).

        Raises RecordError("PROPERTIES_SIZE_EXCEEDED"/"MESSAGE_ILLEGAL: ...") for what upstream rejects."""
        topic = self._topic(msg.topic)
        props = msg.properties_string.encode("utf-8") if msg.properties_string else b""
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise RecordError(
                f"PROPERTIES_SIZE_EXCEEDED: properties are {len(props)} bytes, more than {MAX_PROPERTIES_LENGTH}"
            )
        body = msg.body or b""
        if max_body_size is not None and len(body) > max_body_size:
            raise RecordError(f"MESSAGE_ILLEGAL: body is {len(body)} bytes, more than maxMessageSize {max_body_size}")
        tail = b"".join((topic, _SHORT.pack(len(props)), props))
        return tail, crc32(body) & 0x7FFFFFFF, FIXED_PART_LENGTH + len(body) + len(tail)

    def plan_many(
        self, msgs: list[MessageExtBrokerInner], max_wire_size: int
    ) -> tuple[list[bytes], list[int], list[int], int]:
        """`plan` for a batch of one topic in one pass: (tails, body CRCs, record sizes, total size).

        Raises RecordError("MESSAGE_ILLEGAL: batch of N bytes exceeds maxMessageSize M") first when the
        batch as the client sent it (20 + body + 2 + properties bytes each, upstream's check) is larger
        than `max_wire_size`, then for a topic or properties upstream rejects."""
        topic = self._topic(msgs[0].topic)
        short = _SHORT.pack
        tails: list[bytes] = []
        crcs: list[int] = []
        sizes: list[int] = []
        add_tail, add_crc, add_size = tails.append, crcs.append, sizes.append
        fixed = FIXED_PART_LENGTH
        too_long = 0
        wire_extra = 0  # what records with too long properties add to the wire size below
        for msg in msgs:
            props = (msg.properties_string or "").encode()
            body = msg.body or b""
            if (plen := len(props)) <= MAX_PROPERTIES_LENGTH:
                tail = topic + short(plen) + props  # (+ is cheaper than a join for three)
            else:
                too_long = too_long or plen  # the first one too long (reported after the size check)
                wire_extra += plen + 2 + len(topic)
                tail = b""
            add_tail(tail)
            add_crc(crc32(body) & 0x7FFFFFFF)
            add_size(fixed + len(body) + len(tail))
        total = sum(sizes)
        # the batch as the client sent it: 22 + body + properties bytes a message, that is each record's
        # size without its fixed part, topic and properties length (88 + topic + 2 - 22 bytes)
        wire = total - len(msgs) * (FIXED_PART_LENGTH - 20 + len(topic)) + wire_extra
        if wire > max_wire_size:
            raise RecordError(f"MESSAGE_ILLEGAL: batch of {wire} bytes exceeds maxMessageSize {max_wire_size}")
        if too_long > MAX_PROPERTIES_LENGTH:
            raise RecordError(
                f"PROPERTIES_SIZE_EXCEEDED: properties are {too_long} bytes, more than {MAX_PROPERTIES_LENGTH}"
            )
        return tails, crcs, sizes, total

    def write(
        self,
        buf: bytearray | memoryview,
        pos: int,
        msg: MessageExtBrokerInner,
        tail: bytes,
        crc: int,
        size: int,
        queue_offset: int,
        phy_offset: int,
        store_ts: int,
    ) -> None:
        """Write the record planned by `plan` at `pos` of `buf` (the mapped file, or a staging buffer):
        `write_many` for one record, without its lists and loop (the SEND path puts one at a time)."""
        body = msg.body or b""
        blen = len(body)
        born = msg.born_host
        store = msg.store_host
        hosts = self._hosts
        FIXED_PART.pack_into(
            buf,
            pos,
            size,
            MESSAGE_MAGIC_CODE,
            crc,
            msg.queue_id,
            msg.flag,
            queue_offset,
            phy_offset,
            msg.sys_flag & _IPV4_HOSTS,
            msg.born_timestamp,
            hosts.get(born[0]) or self.host(born[0]),
            born[1],
            store_ts,
            hosts.get(store[0]) or self.host(store[0]),
            store[1],
            msg.reconsume_times,
            msg.prepared_transaction_offset,
            blen,
        )
        b = pos + FIXED_PART_LENGTH
        e = b + blen
        buf[b:e] = body
        buf[e : pos + size] = tail

    def write_many(
        self,
        buf: bytearray | memoryview,
        pos: int,
        msgs: list[MessageExtBrokerInner],
        tails: list[bytes],
        crcs: list[int],
        sizes: list[int],
        queue_offset: int,
        queue_step: int,
        phy_offset: int,
        store_ts: int,
    ) -> list[int]:
        """Write the records planned by `plan`/`plan_many` one after another from `pos` of `buf` (the
        mapped file, or a staging buffer): per record one pack_into of a record Struct (`_batch_record`: the
        born host, store time and store host one 24-byte field, then the body and the tail), no intermediate
        buffer, no attribute lookups on self in the loop. Record i gets queue offset `queue_offset + i *
        queue_step` (0 or 1) and physical offset `phy_offset` + the sizes before it. Returns the physical
        offsets."""
        hosts = self._hosts
        records = self._batch_records
        mask = _IPV4_HOSTS
        magic = MESSAGE_MAGIC_CODE
        phys: list[int] = []
        add = phys.append
        qo = queue_offset
        delta = phy_offset - pos
        born = store = None
        mid = b""
        rec: Any = None
        rec_size = rec_body = -1
        for msg, size, crc, tail in zip(msgs, sizes, crcs, tails):
            body = msg.body or b""
            blen = len(body)
            if msg.born_host is not born or msg.store_host is not store:  # (a batch shares its host tuples)
                born = msg.born_host
                store = msg.store_host
                mid = _HOSTS_AND_TIME.pack(
                    hosts.get(born[0]) or self.host(born[0]),
                    born[1],
                    store_ts,
                    hosts.get(store[0]) or self.host(store[0]),
                    store[1],
                )
            if size != rec_size or blen != rec_body:  # (one Struct for a run of one shape: a batch's, mostly)
                rec = records.get((blen, size)) or self._batch_record(blen, size)
                rec_size, rec_body = size, blen
            phy = pos + delta
            rec.pack_into(
                buf,
                pos,
                size,
                magic,
                crc,
                msg.queue_id,
                msg.flag,
                qo,
                phy,
                msg.sys_flag & mask,
                msg.born_timestamp,
                mid,
                msg.reconsume_times,
                msg.prepared_transaction_offset,
                blen,
                body,
                tail,
            )
            pos += size
            add(phy)
            qo += queue_step
        return phys

    def _batch_record(self, body_length: int, size: int) -> struct.Struct:
        """`write_many`'s Struct of a whole record of this body length and size (bounded, cleared when full)."""
        records = self._batch_records
        if len(records) >= _BATCH_RECORDS_MAX:
            records.clear()
        rec = records[(body_length, size)] = struct.Struct(
            f"{_BATCH_RECORD_FIXED}{body_length}s{size - FIXED_PART_LENGTH - body_length}s"
        )
        return rec

    def encode(self, msg: MessageExtBrokerInner, max_body_size: int | None = None) -> bytearray:
        """Upstream's record bytes for `msg`; QUEUEOFFSET, PHYSICALOFFSET are left 0 and STORETIMESTAMP is
        `msg.store_timestamp`, for the writer to patch under the append lock (`patch_record`).

        Raises RecordError("PROPERTIES_SIZE_EXCEEDED"/"MESSAGE_ILLEGAL: ...") for what upstream rejects."""
        tail, crc, size = self.plan(msg, max_body_size)
        buf = bytearray(size)
        self.write(buf, 0, msg, tail, crc, size, 0, 0, msg.store_timestamp)
        return buf


def encode_record(msg: MessageExtBrokerInner, *, max_body_size: int | None = None) -> bytearray:
    """Upstream's record bytes for `msg` (see RecordEncoder.encode)."""
    return RecordEncoder().encode(msg, max_body_size)


def patch_record(buf: bytearray | memoryview, pos: int, queue_offset: int, phy_offset: int, store_ts: int) -> None:
    """Fill the fields only known under the append lock."""
    _LONG.pack_into(buf, pos + POS_QUEUE_OFFSET, queue_offset)
    _LONG.pack_into(buf, pos + POS_PHYSICAL_OFFSET, phy_offset)
    _LONG.pack_into(buf, pos + POS_STORE_TIMESTAMP, store_ts)


def _host(raw: bytes, port: int) -> tuple[str, int]:
    return socket.inet_ntoa(raw), port


def decode_record(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    *,
    read_body: bool = True,
    check_crc: bool = False,
) -> MessageExt:
    """Decode the record starting at `offset` of `buf` (J MessageDecoder.decode, IPv4 hosts).

    Raises RecordError when the bytes are not a complete, self-consistent message record."""
    mv = memoryview(buf)
    if offset < 0 or offset + FIXED_PART_LENGTH > len(mv):
        raise RecordError(f"no complete record header at offset {offset} (buffer is {len(mv)} bytes)")
    (
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phy_offset,
        sys_flag,
        born_ts,
        born_ip,
        born_port,
        store_ts,
        store_ip,
        store_port,
        reconsume,
        prepared,
        body_len,
    ) = FIXED_PART.unpack_from(mv, offset)
    if magic == BLANK_MAGIC_CODE:
        raise RecordError(f"blank (end of file) record at offset {offset}")
    if magic != MESSAGE_MAGIC_CODE:
        raise RecordError(f"illegal magic code 0x{magic & 0xFFFFFFFF:08X} at offset {offset}")
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        raise RecordError(f"IPv6 host layout (sysFlag 0x{sys_flag:x}) is not supported at offset {offset}")
    if total < 91 or body_len < 0 or offset + total > len(mv) or FIXED_PART_LENGTH + body_len + 3 > total:
        raise RecordError(f"inconsistent record sizes at offset {offset}: total {total}, body {body_len}")
    pos = offset + FIXED_PART_LENGTH
    body_mv = mv[pos : pos + body_len]
    if check_crc and (crc32(body_mv) & 0x7FFFFFFF) != crc:
        raise RecordError(f"body CRC mismatch at offset {offset}")
    pos += body_len
    topic_len = mv[pos]
    pos += 1
    topic = bytes(mv[pos : pos + topic_len]).decode("utf-8", errors="replace")
    pos += topic_len
    if pos + 2 > offset + total:
        raise RecordError(f"inconsistent record sizes at offset {offset}")
    (props_len,) = _SHORT.unpack_from(mv, pos)
    pos += 2
    if props_len < 0 or record_length(body_len, topic_len, props_len) != total:
        raise RecordError(f"record total size {total} does not match its fields at offset {offset}")
    props_str = bytes(mv[pos : pos + props_len]).decode("utf-8", errors="replace") if props_len else ""
    return MessageExt(
        store_size=total,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commit_log_offset=phy_offset,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=_host(born_ip, born_port),
        store_timestamp=store_ts,
        store_host=_host(store_ip, store_port),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=bytes(body_mv) if read_body else b"",
        topic=topic,
        properties=decode_properties(props_str),
        properties_string=props_str,
    )


def decode_records(buf: bytes | bytearray | memoryview) -> list[MessageExt]:
    """Decode a concatenation of records (a pull or query body)."""
    mv = memoryview(buf)
    out: list[MessageExt] = []
    pos = 0
    while pos < len(mv):
        msg = decode_record(mv, pos)
        out.append(msg)
        pos += msg.store_size
    return out
