"""Messages on the client side: properties strings, UNIQ_KEY ids, batch bodies and pull-body decoding.

Wire facts are protocol.md §5: properties are ``name\\x01value\\x02…`` (we write J's form, no
trailing separator), a pull body is stored records back to back (§5.2), and UNIQ_KEY is the J
``MessageClientIDSetter`` layout (IP, pid, a per-process hash, ms since the start of the month, counter).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import random
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT = "WAIT"

MAGIC_MESSAGE = -626843481  # 0xDAA320A7 as a signed int32
MAGIC_BLANK = -875286124

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

_HEAD = struct.Struct(">iiiiiqqiq")  # totalSize .. bornTimestamp (through offset 48)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_BATCH_HEAD = struct.Struct(">iiiii")  # totalSize, magic, crc, flag, bodyLen


class MessageDecodeError(ValueError):
    """A pull/query body that does not parse as stored messages."""


def encode_properties(props: Mapping[str, str]) -> str:
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items())


def decode_properties(text: str) -> dict[str, str]:
    """J semantics: split on \\x02, skip pieces without a \\x01 past position 0, split at the first \\x01."""
    out: dict[str, str] = {}
    for piece in text.split(PROPERTY_SEPARATOR):
        idx = piece.find(NAME_VALUE_SEPARATOR)
        if idx > 0:
            out[piece[:idx]] = piece[idx + 1 :]
    return out


@dataclass(slots=True)
class Message:
    """A message to send. ``properties`` holds user properties plus TAGS/KEYS as J does."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)

    def all_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = self.keys
        return props


@dataclass(slots=True)
class MessageExt:
    """A consumed message, decoded from a stored record."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    body: bytes
    properties: dict[str, str]
    store_size: int
    body_crc: int

    @property
    def offset_msg_id(self) -> str:
        return create_offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """What J/C/G clients call msgId: the UNIQ_KEY when the producer set one, else the offset id."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split on spaces, as the broker indexes them."""
        return [k for k in self.properties.get("KEYS", "").split(" ") if k]


def create_offset_msg_id(store_host: str, commit_log_offset: int) -> str:
    host, _, port = store_host.rpartition(":")
    try:
        ip = socket.inet_aton(host)
    except OSError:
        ip = socket.inet_pton(socket.AF_INET6, host.strip("[]"))
    return (ip + struct.pack(">iq", int(port), commit_log_offset)).hex().upper()


def _host(buf: memoryview, pos: int, v6: bool) -> tuple[str, int]:
    if v6:
        ip = socket.inet_ntop(socket.AF_INET6, bytes(buf[pos : pos + 16]))
        port = _I32.unpack_from(buf, pos + 16)[0]
        return f"[{ip}]:{port}", pos + 20
    ip = socket.inet_ntoa(bytes(buf[pos : pos + 4]))
    port = _I32.unpack_from(buf, pos + 4)[0]
    return f"{ip}:{port}", pos + 8


def decode_messages(body: bytes | memoryview, *, decompress: bool = True) -> list[MessageExt]:
    """Decode a PULL_MESSAGE / QUERY_MESSAGE body (protocol §5.2/§5.3); raises MessageDecodeError."""
    buf = memoryview(body)
    out: list[MessageExt] = []
    pos, end = 0, len(buf)
    while pos < end:
        start = pos
        try:
            total, magic, crc, queue_id, flag, queue_offset, phy_offset, sys_flag, born_ts = _HEAD.unpack_from(buf, pos)
            if magic != MAGIC_MESSAGE:
                raise MessageDecodeError(f"record at byte {start}: bad magic code {magic & 0xFFFFFFFF:#x}")
            if total < 91 or start + total > end:
                raise MessageDecodeError(
                    f"record at byte {start}: total size {total} does not fit the {end - start} bytes left"
                )
            pos += _HEAD.size
            born_host, pos = _host(buf, pos, bool(sys_flag & SYSFLAG_BORNHOST_V6))
            store_ts = _I64.unpack_from(buf, pos)[0]
            pos += 8
            store_host, pos = _host(buf, pos, bool(sys_flag & SYSFLAG_STOREHOST_V6))
            reconsume = _I32.unpack_from(buf, pos)[0]
            pos += 4 + 8  # reconsume times, prepared transaction offset
            body_len = _I32.unpack_from(buf, pos)[0]
            pos += 4
            payload = bytes(buf[pos : pos + body_len])
            pos += body_len
            topic_len = buf[pos]
            pos += 1
            topic = bytes(buf[pos : pos + topic_len]).decode("utf-8")
            pos += topic_len
            prop_len = _I16.unpack_from(buf, pos)[0]
            pos += 2
            props = decode_properties(bytes(buf[pos : pos + prop_len]).decode("utf-8")) if prop_len > 0 else {}
            pos += prop_len
        except struct.error as exc:
            raise MessageDecodeError(f"record at byte {start}: truncated ({exc})") from None
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"record at byte {start}: bad UTF-8 in topic or properties ({exc})") from None
        if pos != start + total:
            raise MessageDecodeError(f"record at byte {start}: fields take {pos - start} bytes, TOTALSIZE says {total}")
        if decompress and sys_flag & SYSFLAG_COMPRESSED:
            try:
                payload = zlib.decompress(payload)
            except zlib.error as exc:
                raise MessageDecodeError(f"record at byte {start}: compressed body does not inflate ({exc})") from None
        out.append(
            MessageExt(
                topic=topic,
                queue_id=queue_id,
                queue_offset=queue_offset,
                commit_log_offset=phy_offset,
                sys_flag=sys_flag,
                flag=flag,
                born_timestamp=born_ts,
                born_host=born_host,
                store_timestamp=store_ts,
                store_host=store_host,
                reconsume_times=reconsume,
                body=payload,
                properties=props,
                store_size=total,
                body_crc=crc,
            )
        )
    return out


def encode_batch(messages: Iterable[Message], uniq_keys: Iterable[str]) -> bytes:
    """SEND_BATCH_MESSAGE body: per message ``totalSize magic(0) crc(0) flag bodyLen body propLen props``."""
    parts: list[bytes] = []
    for msg, key in zip(messages, uniq_keys, strict=True):
        props = msg.all_properties()
        props[PROPERTY_UNIQ_KEY] = key
        prop_bytes = encode_properties(props).encode("utf-8")
        head = bytearray(_BATCH_HEAD.size)
        _BATCH_HEAD.pack_into(head, 0, 20 + len(msg.body) + 2 + len(prop_bytes), 0, 0, msg.flag, len(msg.body))
        parts += [bytes(head), msg.body, _I16.pack(len(prop_bytes)), prop_bytes]
    return b"".join(parts)


def local_ip() -> str:
    """This host's IPv4 address as a client names itself (client ids, UNIQ_KEY), 127.0.0.1 if unresolvable."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def new_client_id(tag: str = "") -> str:
    """``ip@pid#<tag><12 hex>``: unique per client object, as several clients of one group may live in one
    process here (J's ``ip@pid`` is per process)."""
    return f"{local_ip()}@{os.getpid()}#{tag}{os.urandom(6).hex()}"


def _local_ip() -> bytes:
    return socket.inet_aton(local_ip())


class UniqKeyGenerator:
    """J ``MessageClientIDSetter``: 32 upper-case hex chars, unique per process and message."""

    def __init__(
        self, *, now_ms: Callable[[], int] | None = None, pid: int | None = None, ip: bytes | None = None
    ) -> None:
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        fixed = (ip or _local_ip()) + struct.pack(
            ">hi", (pid if pid is not None else os.getpid()) & 0x7FFF, random.getrandbits(31)
        )
        self._prefix = fixed.hex().upper()
        self._counter = itertools.count(random.getrandbits(15))
        self._month_start = 0
        self._next_month = 0

    def _roll_month(self, now: int) -> None:
        d = _dt.datetime.fromtimestamp(now / 1000, tz=_dt.UTC)
        start = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (start + _dt.timedelta(days=32)).replace(day=1)
        self._month_start = int(start.timestamp() * 1000)
        self._next_month = int(nxt.timestamp() * 1000)

    def next(self) -> str:
        now = self._now_ms()
        if now >= self._next_month or now < self._month_start:
            self._roll_month(now)
        tail = struct.pack(">iH", (now - self._month_start) & 0x7FFFFFFF, next(self._counter) & 0xFFFF)
        return self._prefix + tail.hex().upper()
