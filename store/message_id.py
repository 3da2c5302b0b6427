"""Offset message ids: a record's store host and CommitLog offset as the 32 hex chars clients see (protocol §5.4).

`host_to_bytes` gives the 4-byte IPv4 a record stores for a host; `create_offset_msg_id`, `offset_msg_id_prefix` and
`join_offset_msg_ids` write ids (one, or a batch's comma-joined list); `decode_offset_msg_id` reads one back.
"""

from __future__ import annotations

import socket
import struct
import sys
from array import array

_MSG_ID = struct.Struct(">4siq")


def host_to_bytes(ip: str) -> bytes:
    """4-byte IPv4 for the record's host fields. Clients C/N decode hosts as IPv4 only, so an IPv6
    peer is stored as its mapped IPv4 when it has one, else 0.0.0.0 (never an IPv6 layout)."""
    try:
        return socket.inet_aton(ip)
    except OSError:
        pass
    try:
        raw = socket.inet_pton(socket.AF_INET6, ip.split("%", 1)[0])
    except OSError:
        return b"\x00\x00\x00\x00"
    if raw[:12] == b"\x00" * 10 + b"\xff\xff":
        return raw[12:]
    if raw == socket.inet_pton(socket.AF_INET6, "::1"):
        return b"\x7f\x00\x00\x01"
    return b"\x00\x00\x00\x00"


def create_offset_msg_id(ip: str, port: int, phy_offset: int) -> str:
    """Offset message id: upper-case hex of storeHost IPv4 (4) + port (int32) + CommitLog offset (int64)."""
    return _MSG_ID.pack(host_to_bytes(ip), port, phy_offset).hex().upper()


def offset_msg_id_prefix(ip: str, port: int) -> str:
    """The 16 hex chars an offset id starts with for a given store host (the writer caches this)."""
    return _MSG_ID.pack(host_to_bytes(ip), port, 0).hex().upper()[:16]


def join_offset_msg_ids(prefix: str, phys: list[int]) -> str:
    """The offset ids of records at `phys` (host prefix from `offset_msg_id_prefix`), comma-joined
    as upstream answers a batch: the offsets packed and hex-formatted in one go (a per-record format
    string was the costliest line of a batch append)."""
    if len(phys) == 1:
        return f"{prefix}{phys[0]:016X}"
    packed = array("q", phys)
    if sys.byteorder == "little":
        packed.byteswap()
    return prefix + packed.tobytes().hex(",", 8).upper().replace(",", "," + prefix)


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(ip, port, commit-log offset) of an offset message id; ValueError with a clear message otherwise."""
    if not isinstance(msg_id, str) or len(msg_id) not in (32, 56):
        raise ValueError(f"an offset message id has 32 (IPv4) or 56 (IPv6) hex chars, got {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"offset message id is not hexadecimal: {msg_id!r}") from None
    if len(raw) == 16:
        ip = socket.inet_ntoa(raw[:4])
        port, offset = struct.unpack(">iq", raw[4:])
    else:
        ip = socket.inet_ntop(socket.AF_INET6, raw[:16])
        port, offset = struct.unpack(">iq", raw[16:])
    return ip, port, offset
