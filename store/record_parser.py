"""Reading CommitLog records back: the record parser of the reput, the recovery scan and the rebuilds.

`RecordParser` turns records into dispatch facts: one at a time (`parse_dispatch`, a DispatchRequest),
from what the writer still holds (`describe`: the facts of records it just appended, no parse), or in
bulk (`walk` follows the chain of record sizes, `parse_many` gathers the facts of many records with
numpy: fixed parts as a structured array, topics per run, the TAGS/KEYS/UNIQ_KEY/DELAY properties with
J's parser semantics and the index key hashes without building strings). `verify_record` and
`consistent_sizes` are the recovery scan's checks. It also owns the tags-code cache and the delay
levels (the consume queue's tags code of a delayed message is its delivery time).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np
import structlog

from store.config import MessageStoreConfig
from store.java_hash import JavaHasher, abs_hashes, combine, java_string_hash
from store.message import (
    BLANK_MAGIC_CODE,
    FIXED_PART,
    FIXED_PART_LENGTH,
    MESSAGE_MAGIC_CODE,
    RMQ_SYS_SCHEDULE_TOPIC,
    MessageConst,
    crc32,
    decode_properties,
    tags_hash,
)

if TYPE_CHECKING:
    from store.commit_log import AppendRequest, DispatchBatch

log = structlog.get_logger(__name__)

_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_BLANK = struct.Struct(">ii")
# the fixed part as numpy sees it (the bulk parser gathers it for many records at once). Built at first use, not
# at import: a start that parses no record does not import numpy (broker.deferred_import)
_RECORD_FIELDS = [
    ("total", ">i4"),
    ("magic", ">i4"),
    ("crc", ">i4"),
    ("queue_id", ">i4"),
    ("flag", ">i4"),
    ("queue_offset", ">i8"),
    ("phy", ">i8"),
    ("sys_flag", ">i4"),
    ("born_ts", ">i8"),
    ("born_host", "V8"),
    ("store_ts", ">i8"),
    ("store_host", "V8"),
    ("reconsume", ">i4"),
    ("prepared", ">i8"),
    ("body_len", ">i4"),
]


@functools.cache
def record_dtype() -> np.dtype:
    dtype = np.dtype(_RECORD_FIELDS)
    assert dtype.itemsize == FIXED_PART_LENGTH
    return dtype


def __getattr__(name: str):
    if name == "RECORD_DTYPE":
        return record_dtype()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


BULK_RECORDS = 32768  # records per bulk parse (bounds the temporary arrays; the reput yields between)
_PROPERTY_NAMES = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY")


@dataclass(slots=True)
class DispatchRequest:
    """What the reput hands to the consume queue and index builders (upstream DispatchRequest)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties: dict[str, str] | None


@dataclass(slots=True)
class ParsedRecords:
    """Dispatch facts of consecutive records, as arrays (the bulk reput: recovery, rebuilds)."""

    phy: np.ndarray  # int64 CommitLog offsets
    size: np.ndarray  # int64
    queue_id: np.ndarray  # int64
    queue_offset: np.ndarray  # int64
    sys_flag: np.ndarray  # int64
    store_ts: np.ndarray  # int64
    tags_code: np.ndarray  # int64 (the delivery time in the schedule topic)
    topic_id: np.ndarray  # int64 index into topics
    topics: list[str]
    key_record: np.ndarray  # int64: the record of each index key, in index order
    key_hash: np.ndarray  # int64: its index hash, abs(String.hashCode(topic + "#" + key))
    props: list[bytes]  # raw properties (decoded only when an arrival listener needs them)

    def __len__(self) -> int:
        return len(self.phy)


class RecordParser:
    """Dispatch facts of CommitLog records (see the module docstring). Parses may run in worker
    threads (`parse_many`): they only read the view and the caches below."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self._delay_levels = config.delay_levels_ms()
        self.tags_cache: dict[str | None, int] = {None: 0, "": 0}  # TAGS value → consume-queue tags code
        # the bulk parser keeps each record's raw properties only when someone will read them
        self.want_raw_props: Callable[[], bool] = lambda: False

    def expand(self, batch: DispatchBatch) -> list[DispatchRequest]:
        """The DispatchRequests of a batch descriptor, for the reput's record-by-record path."""
        return self.describe(
            batch.request, 0, batch.commit_log_offset, batch.consume_queue_offset, batch.store_timestamp, True
        )

    def describe(
        self, req: AppendRequest, start: int, wrote_offset: int, queue_offset: int, store_ts: int, counts: bool
    ) -> list[DispatchRequest]:
        """DispatchRequests for records start.. of `req` (so that the reput need not parse them)."""
        sizes = req.sizes
        phy = wrote_offset + sum(sizes[:start])
        qo = queue_offset + start if counts else queue_offset
        out: list[DispatchRequest] = []
        topic = req.topic
        for i in range(start, len(req.msgs)):
            props = req.msgs[i].properties
            size = sizes[i]
            out.append(
                DispatchRequest(
                    topic,
                    req.queue_id,
                    phy,
                    size,
                    self.dispatch_tags_code(topic, props, store_ts),
                    store_ts,
                    qo,
                    props.get(MessageConst.KEYS),
                    props.get(MessageConst.UNIQ_KEY),
                    req.sys_flag,
                    req.prepared_transaction_offset,
                    props,
                )
            )
            phy += size
            if counts:
                qo += 1
        return out

    def dispatch_tags_code(self, topic: str, props: dict[str, str], store_ts: int) -> int:
        """Consume-queue tags code: the TAGS hash, or the delivery time in the schedule topic."""
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            level = _int_or_zero(props.get(MessageConst.DELAY))
            if level > 0:
                return self.compute_deliver_timestamp(level, store_ts)
        return self.tags_code_of(props.get(MessageConst.TAGS))

    def compute_deliver_timestamp(self, delay_level: int, store_ts: int) -> int:
        """ScheduleMessageService.computeDeliverTimestamp: the tags code of a delayed message."""
        level = min(delay_level, len(self._delay_levels))
        return store_ts + self._delay_levels[level - 1] if level > 0 else store_ts + 1000

    @property
    def max_delay_level(self) -> int:
        return len(self._delay_levels)

    # ---------------------------------------------------------------------------------------- parsing
    def parse_dispatch(self, view: memoryview, pos: int, check_crc: bool) -> tuple[int, DispatchRequest | None]:
        """(size, request) of the record at `pos`: size > 0 a message, 0 the BLANK end of a file,
        -1 not a valid record (upstream checkMessageAndReturnSize)."""
        if pos + 8 > len(view):
            return -1, None
        total, magic = _BLANK.unpack_from(view, pos)
        if magic == BLANK_MAGIC_CODE:
            return 0, None
        if magic != MESSAGE_MAGIC_CODE or total < 91 or pos + total > len(view):
            return -1, None
        (
            _total,
            _magic,
            crc,
            queue_id,
            _flag,
            queue_offset,
            phy,
            sys_flag,
            _born_ts,
            _born_ip,
            _born_port,
            store_ts,
            _store_ip,
            _store_port,
            _reconsume,
            prepared,
            body_len,
        ) = FIXED_PART.unpack_from(view, pos)
        if body_len < 0 or FIXED_PART_LENGTH + body_len + 3 > total:
            return -1, None
        p = pos + FIXED_PART_LENGTH
        if check_crc and (crc32(view[p : p + body_len]) & 0x7FFFFFFF) != crc:
            log.warning("CRC check failed", offset=phy)
            return -1, None
        p += body_len
        topic_len = view[p]
        p += 1
        topic = bytes(view[p : p + topic_len]).decode("utf-8", errors="replace")
        p += topic_len
        (props_len,) = _SHORT.unpack_from(view, p)
        p += 2
        if props_len < 0 or 91 + body_len + topic_len + props_len != total:
            return -1, None
        props = decode_properties(bytes(view[p : p + props_len]).decode("utf-8", errors="replace")) if props_len else {}
        tags = props.get(MessageConst.TAGS)
        tags_code = self.tags_code_of(tags)
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            level = _int_or_zero(props.get(MessageConst.DELAY))
            if level > 0:
                tags_code = self.compute_deliver_timestamp(min(level, self.max_delay_level), store_ts)
        return total, DispatchRequest(
            topic,
            queue_id,
            phy,
            total,
            tags_code,
            store_ts,
            queue_offset,
            props.get(MessageConst.KEYS),
            props.get(MessageConst.UNIQ_KEY),
            sys_flag,
            prepared,
            props,
        )

    @staticmethod
    def walk(view: memoryview, pos: int, stop: int, max_records: int) -> tuple[list[int], int, int]:
        """Positions of consecutive message records from `pos` (headers only, no CRC), at most
        `max_records`, stopping before `stop` (-1: none). Returns (positions, next position, reason):
        reason 1 = more may follow (end of the view, `stop`, or the count), 0 = the BLANK end of the file,
        -1 = something that is not a record at the next position.

        The chain is followed one record at a time (each size says where the next record starts), so
        this loop is the scan's and the replay's per-record Python: the first loop takes the records
        well inside the view and before `stop` with the fewest checks; the second decides, with every
        check, how the walk ends."""
        unpack = _BLANK.unpack_from
        end = len(view)
        out: list[int] = []
        append = out.append
        limit = end - 8
        fast_end = limit + 1 if stop < pos else min(stop, limit + 1)
        magic_code = MESSAGE_MAGIC_CODE
        for _ in repeat(None, max_records):
            if pos >= fast_end:
                break
            total, magic = unpack(view, pos)
            if magic != magic_code or total < 91 or pos + total > end:
                break
            append(pos)
            pos += total
        while len(out) < max_records:
            if pos == stop or pos >= end:
                return out, pos, 1
            if pos > limit:
                return out, pos, -1
            total, magic = unpack(view, pos)
            if magic != magic_code:
                return out, pos, 0 if magic == BLANK_MAGIC_CODE else -1
            if total < 91 or pos + total > end:
                return out, pos, -1
            append(pos)
            pos += total
        return out, pos, 1

    def parse_many(self, view: memoryview, positions: list[int], with_keys: bool = True) -> tuple[ParsedRecords, int]:
        """Dispatch facts of the records at `positions` (from `walk`), vectorised. Returns the facts of
        the leading records whose sizes are consistent and how many that is (the next one, if any, is
        not a valid record). `with_keys`: also the index keys (UNIQ_KEY, each KEYS value) as hashes."""
        u8 = np.frombuffer(view, dtype=np.uint8)
        last = len(u8) - 1
        pos = np.array(positions, dtype=np.int64)
        # each fixed part copied as one 88-byte row of a sliding-window view (walk: pos + 91 <= len)
        hdr = _windows(u8, FIXED_PART_LENGTH)[pos].view(record_dtype()).reshape(-1)
        total = hdr["total"].astype(np.int64)
        body_len = hdr["body_len"].astype(np.int64)
        tpos = pos + FIXED_PART_LENGTH + body_len
        tlen = u8[np.minimum(tpos, last)].astype(np.int64)
        ppos = tpos + 1 + tlen
        plen = (u8[np.minimum(ppos, last)].astype(np.int64) << 8) | u8[np.minimum(ppos + 1, last)]
        plen = np.where(plen >= 0x8000, plen - 0x10000, plen)  # signed short
        ok = (body_len >= 0) & (FIXED_PART_LENGTH + body_len + 3 <= total) & (plen >= 0)
        ok &= 91 + body_len + tlen + plen == total
        n = len(pos) if ok.all() else int(np.argmin(ok))
        if n < len(pos):
            hdr, total, tpos, tlen, ppos, plen = hdr[:n], total[:n], tpos[:n], tlen[:n], ppos[:n], plen[:n]
        topics, topic_ids = _topics_of(u8, tpos + 1, tlen, view)
        # properties: the four this dispatch needs, with J's parser semantics (pieces split on \x02,
        # key up to the first \x01, non-empty key and value, the last one wins), vectorised
        pstart = ppos + 2
        pend = pstart + plen
        found = _find_properties(u8, pstart, pend)
        store_ts = hdr["store_ts"].astype(np.int64)
        tags_code = np.zeros(n, dtype=np.int64)
        who, a, b = found[0]
        if len(who):
            h, exact = _HASHER.segment_hashes(u8, a, b)
            tags_code[who[exact]] = h[exact]
            for r, x, y in zip(who[~exact].tolist(), a[~exact].tolist(), b[~exact].tolist()):
                tags_code[r] = self.tags_code_of(view[x:y].tobytes().decode("utf-8", errors="replace"))
        schedule = topics.index(RMQ_SYS_SCHEDULE_TOPIC) if RMQ_SYS_SCHEDULE_TOPIC in topics else -1
        if schedule >= 0:
            ts_list = store_ts.tolist()
            delays = dict(zip(found[3][0].tolist(), zip(found[3][1].tolist(), found[3][2].tolist())))
            for i in np.flatnonzero(topic_ids == schedule).tolist():
                span = delays.get(i)
                text = view[span[0] : span[1]].tobytes().decode("utf-8", errors="replace") if span else None
                level = _int_or_zero(text)
                if level > 0:
                    tags_code[i] = self.compute_deliver_timestamp(min(level, self.max_delay_level), ts_list[i])
        key_record, key_hash = (
            _index_key_hashes(u8, view, topics, topic_ids, found[2], found[1])
            if with_keys
            else (
                np.empty(0, dtype=np.int64),
                np.empty(0, dtype=np.int64),
            )
        )
        return (
            ParsedRecords(
                phy=hdr["phy"].astype(np.int64),
                size=total,
                queue_id=hdr["queue_id"].astype(np.int64),
                queue_offset=hdr["queue_offset"].astype(np.int64),
                sys_flag=hdr["sys_flag"].astype(np.int64),
                store_ts=store_ts,
                tags_code=tags_code,
                topic_id=topic_ids,
                topics=topics,
                key_record=key_record,
                key_hash=key_hash,
                props=[view[a:b].tobytes() for a, b in zip(pstart.tolist(), pend.tolist())]
                if self.want_raw_props()
                else [],
            ),
            n,
        )

    def tags_code_of(self, tags: str | None) -> int:
        if not tags:
            return 0
        code = self.tags_cache.get(tags)
        if code is None:
            if len(self.tags_cache) > 4096:
                self.tags_cache.clear()
            code = self.tags_cache[tags] = tags_hash(tags)
        return code

    @staticmethod
    def verify_record(view: memoryview, pos: int, check_crc: bool) -> int:
        """Size of the valid record at `pos`, 0 for the BLANK filler, -1 for anything else (recovery scan)."""
        end = len(view)
        if pos + 8 > end:
            return -1
        total, magic = _BLANK.unpack_from(view, pos)
        if magic != MESSAGE_MAGIC_CODE:
            return 0 if magic == BLANK_MAGIC_CODE else -1
        if total < 91 or pos + total > end:
            return -1
        (crc,) = _INT.unpack_from(view, pos + 8)
        (body_len,) = _INT.unpack_from(view, pos + 84)
        if body_len < 0 or FIXED_PART_LENGTH + body_len + 3 > total:
            return -1
        p = pos + FIXED_PART_LENGTH + body_len
        topic_len = view[p]
        (props_len,) = _SHORT.unpack_from(view, p + 1 + topic_len) if p + 3 + topic_len <= end else (-1,)
        if props_len < 0 or 91 + body_len + topic_len + props_len != total:
            return -1
        if check_crc:
            body = view[pos + FIXED_PART_LENGTH : pos + FIXED_PART_LENGTH + body_len]
            if (crc32(body) & 0x7FFFFFFF) != crc:
                return -1
        return total


_SPACE = ord(" ")
_HASHER = JavaHasher()  # (keeps its power tables between parses)


def consistent_sizes(u8: np.ndarray, positions: list[int]) -> tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """How many leading records at `positions` have consistent sizes (verify_record's checks after the
    magic and the total size), and their (body start, body end, stored CRC) arrays."""
    last = len(u8) - 1
    pos = np.array(positions, dtype=np.int64)
    hdr = _windows(u8, FIXED_PART_LENGTH)[pos].view(record_dtype()).reshape(-1)
    total = hdr["total"].astype(np.int64)
    crc = hdr["crc"].astype(np.int64)
    body_len = hdr["body_len"].astype(np.int64)
    tpos = pos + FIXED_PART_LENGTH + np.maximum(body_len, 0)
    tlen = u8[np.minimum(tpos, last)].astype(np.int64)
    ppos = tpos + 1 + tlen
    plen = (u8[np.minimum(ppos, last)].astype(np.int64) << 8) | u8[np.minimum(ppos + 1, last)]
    plen = np.where(plen >= 0x8000, plen - 0x10000, plen)
    ok = (body_len >= 0) & (FIXED_PART_LENGTH + body_len + 3 <= total) & (tpos + 3 + tlen <= pos + total)
    ok &= (plen >= 0) & (91 + body_len + tlen + plen == total)
    n = len(pos) if ok.all() else int(np.argmin(ok))
    return n, (pos + FIXED_PART_LENGTH, tpos, crc)


def _windows(u8: np.ndarray, width: int) -> np.ndarray:
    """Read-only (len - width + 1, width) view of every `width` bytes of `u8` (no copy): indexing it
    with positions copies one row per position, far cheaper than an index matrix."""
    n = len(u8) - width + 1
    if n <= 0:
        return np.empty((0, width), dtype=np.uint8)
    return np.lib.stride_tricks.as_strided(u8, shape=(n, width), strides=(1, 1), writeable=False)


def _find_properties(
    u8: np.ndarray, pstart: np.ndarray, pend: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For TAGS, KEYS, UNIQ_KEY and DELAY: (record, value start, value end) arrays of the records whose
    properties, spanning [pstart, pend) of `u8`, have it, exactly as J's string2messageProperties reads
    them (pieces split on \x02, the name up to the first \x01, non-empty value, the last one wins)."""
    n = len(pstart)
    empty = np.empty(0, dtype=np.int64)
    if n == 0 or not (pend > pstart).any():
        return [(empty, empty, empty) for _ in _PROPERTY_NAMES]
    plen = pend - pstart
    width = int(plen.max())
    if n * width <= (int(pend[-1]) - int(pstart[0])) // 2:
        # the properties as rows of a sliding-window view: only their bytes are searched
        row_start = np.minimum(pstart, len(u8) - width)  # rows near the end of the view start earlier
        rec, col = np.nonzero(_windows(u8, width)[row_start] == 2)
        # (a row runs past shorter properties into the next record: keep the \x02 bytes inside them)
        seps = row_start[rec] + col
        inside = (seps >= pstart[rec]) & (seps < pend[rec])
        seps, rec = seps[inside], rec[inside]
    else:
        lo, hi = int(pstart[0]), int(pend[-1])
        seps = np.flatnonzero(u8[lo:hi] == 2) + lo
        rec = np.searchsorted(pstart, seps, side="right") - 1
        inside = seps < pend[rec]  # \x02 bytes of bodies and headers are not separators
        seps, rec = seps[inside], rec[inside]
    # pieces in order: each record's first piece, then one after each of its separators
    per_record = np.bincount(rec, minlength=n)
    first_slot = np.arange(n, dtype=np.int64) + np.cumsum(per_record) - per_record
    starts = np.empty(n + len(seps), dtype=np.int64)
    owner = np.empty(n + len(seps), dtype=np.int64)
    starts[first_slot] = pstart
    owner[first_slot] = np.arange(n, dtype=np.int64)
    sep_slot = first_slot[rec] + 1 + (np.arange(len(seps), dtype=np.int64) - (np.cumsum(per_record) - per_record)[rec])
    starts[sep_slot] = seps + 1
    owner[sep_slot] = rec
    ends = np.empty_like(starts)
    ends[:-1] = np.where(owner[1:] == owner[:-1], starts[1:] - 1, pend[owner[:-1]])
    ends[-1] = pend[owner[-1]]
    long_enough = ends - starts > 2
    first = u8[np.minimum(starts, len(u8) - 1)]
    out = []
    for name in _PROPERTY_NAMES:
        k = len(name)
        cand = np.flatnonzero(long_enough & (first == name[0]) & (ends - starts > k + 1))
        at = starts[cand]
        hit = u8[at + k] == 1
        for j in range(1, k):
            hit &= u8[at + j] == name[j]
        cand = cand[hit]
        who = owner[cand]
        last = np.ones(len(cand), dtype=bool)
        last[:-1] = who[1:] != who[:-1]  # a name twice in one record: the later piece wins
        cand, who = cand[last], who[last]
        out.append((who, starts[cand] + k + 1, ends[cand]))
    return out


def _topics_of(u8: np.ndarray, starts: np.ndarray, lens: np.ndarray, view: memoryview) -> tuple[list[str], np.ndarray]:
    """(distinct topics, topic index of each record): records come in runs of one topic, so only the
    first record of each run is decoded."""
    n = len(starts)
    ids = np.zeros(n, dtype=np.int64)
    if n == 0:
        return [], ids
    change = np.ones(n, dtype=bool)
    change[1:] = lens[1:] != lens[:-1]
    width = int(lens.max())
    if width and n > 1:
        # compare each topic with the one before it (bytes past a topic's end do not count); a topic
        # too close to the end of the view for a full row starts a run of its own
        windows = _windows(u8, width)
        fits = starts <= len(u8) - width
        rows = windows[np.where(fits, starts, 0)]
        differs = ((rows[1:] != rows[:-1]) & (np.arange(width) < lens[1:, None])).any(axis=1)
        change[1:] |= differs | ~fits[1:] | ~fits[:-1]
    runs = np.flatnonzero(change)
    index: dict[bytes, int] = {}
    topics: list[str] = []
    run_ids = []
    for a, k in zip(starts[runs].tolist(), lens[runs].tolist()):
        raw = view[a : a + k].tobytes()
        t = index.get(raw)
        if t is None:
            t = index[raw] = len(topics)
            topics.append(raw.decode("utf-8", errors="replace"))
        run_ids.append(t)
    ids[:] = np.repeat(np.array(run_ids, dtype=np.int64), np.diff(np.append(runs, n)))
    return topics, ids


def _index_key_hashes(
    u8: np.ndarray,
    view: memoryview,
    topics: list[str],
    topic_ids: np.ndarray,
    uniq: tuple[np.ndarray, np.ndarray, np.ndarray],
    keys: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """(record, abs hash) of every index key — the UNIQ_KEY, then each space-separated KEYS value, per
    record in CommitLog order — hashed as topic + "#" + key without building the strings. Values that
    are not plain ASCII, and KEYS holding several keys, take the scalar path."""
    prefix = np.array([java_string_hash(t + "#") for t in topics], dtype=np.int64)
    recs, subs, hashes = [], [], []
    for sub, (who, a, b) in enumerate((uniq, keys)):
        if not len(who):
            continue
        # several keys in one KEYS value (a space between them) take the scalar path too
        h, exact = _HASHER.segment_hashes(u8, a, b, _SPACE if sub == 1 else -1)
        full = combine(prefix[topic_ids[who]], h, b - a)
        recs.append(who[exact])
        subs.append(np.full(int(exact.sum()), sub, dtype=np.int64))
        hashes.append(abs_hashes(full[exact]))
        slow_r, slow_h, slow_s = [], [], []
        for r, x, y in zip(who[~exact].tolist(), a[~exact].tolist(), b[~exact].tolist()):
            text = view[x:y].tobytes().decode("utf-8", errors="replace")
            parts = [text] if sub == 0 else [k for k in text.split(MessageConst.KEY_SEPARATOR) if k]
            topic = topics[int(topic_ids[r])]
            for j, key in enumerate(parts):
                h32 = java_string_hash(f"{topic}#{key}")
                slow_r.append(r)
                slow_s.append(sub + j)
                slow_h.append(0 if h32 == -0x80000000 else abs(h32))
        if slow_r:
            recs.append(np.array(slow_r, dtype=np.int64))
            subs.append(np.array(slow_s, dtype=np.int64))
            hashes.append(np.array(slow_h, dtype=np.int64))
    if not recs:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    rec = np.concatenate(recs)
    sub = np.concatenate(subs)
    order = np.lexsort((sub, rec))
    return rec[order], np.concatenate(hashes)[order]


def _int_or_zero(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0
