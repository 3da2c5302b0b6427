"""Result and status types of the store API (upstream names: PutMessageStatus, GetMessageStatus, ...)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable


class PutMessageStatus(str, Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(str, Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class AppendMessageResult:
    wrote_offset: int  # CommitLog offset of the first record
    wrote_bytes: int
    msg_id: str  # offset id; comma-joined for a batch (as upstream)
    store_timestamp: int
    logics_offset: int  # queue offset of the first record
    msg_num: int = 1
    page_cache_rt: int = 0  # ms spent in the append

    @property
    def msg_ids(self) -> list[str]:
        """One offset id per record (a batch's `msg_id` joins them with commas, as upstream)."""
        return self.msg_id.split(",")


@dataclass(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    append_result: AppendMessageResult | None = None
    remark: str | None = None  # why, for MESSAGE_ILLEGAL and friends

    def is_ok(self) -> bool:
        return self.append_result is not None and self.status == PutMessageStatus.PUT_OK


class StoredPut(PutMessageResult):
    """The `PutMessageResult` of one record a group put appended inline (`CommitLog.append_group_now`): the
    `AppendMessageResult`'s values held in this one object instead of two (a send answered from it reads them
    here: one object and one `__init__` a stored message fewer on the SEND path). `append_result` builds the
    equal `AppendMessageResult` when asked; equal to the two-object result of the same put. `status` may still
    change (SYNC_FLUSH: FLUSH_DISK_TIMEOUT)."""

    __slots__ = ("wrote_offset", "wrote_bytes", "msg_id", "store_timestamp", "logics_offset")

    msg_num = 1
    page_cache_rt = 0

    def __init__(  # (no super().__init__: positional slot stores are the point)
        self, wrote_offset: int, wrote_bytes: int, msg_id: str, store_timestamp: int, logics_offset: int
    ) -> None:
        self.status = PutMessageStatus.PUT_OK
        self.remark = None
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.msg_id = msg_id
        self.store_timestamp = store_timestamp
        self.logics_offset = logics_offset

    @property  # type: ignore[override]
    def append_result(self) -> AppendMessageResult:
        return AppendMessageResult(
            self.wrote_offset, self.wrote_bytes, self.msg_id, self.store_timestamp, self.logics_offset
        )

    def is_ok(self) -> bool:
        return self.status == PutMessageStatus.PUT_OK

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PutMessageResult):
            return NotImplemented
        return (self.status, self.append_result, self.remark) == (other.status, other.append_result, other.remark)

    __hash__ = None  # type: ignore[assignment]  (as the dataclass's: mutable, compared by value)

    def __repr__(self) -> str:
        return f"StoredPut(status={self.status!r}, append_result={self.append_result!r}, remark=None)"


@dataclass(init=False)
class GetMessageResult:
    """What ``get_message`` found: ``buffers`` holds one zero-copy view per record.

    When the records lie back to back in one commit-log file (a batch that went to one queue, such as every drain
    backlog of the benchmarks, filled in batches), the reader sets ``span``, ONE view of them all, and ``buffers``
    is a ``BackToBack`` that cuts the records from it only when someone reads them: a pull answers ``span`` as its
    body as is, without 32 cuts and a join. Only the reader sets these (``set_span``)."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] | BackToBack = field(default_factory=list)  # raw records, zero-copy views
    message_count: int = 0
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False
    msg_queue_offsets: list[int] = field(default_factory=list)
    span: memoryview | None = None  # every record, back to back (None: join ``buffers``)

    def __init__(self, status: GetMessageStatus, next_begin_offset: int, min_offset: int, max_offset: int) -> None:
        """(Written out: one per pull, two per caught-up cycle; the generated one spends ~15 more bytecodes on its
        default factories. Not slotted: the fields with a plain default are read from the class until set, four
        stores fewer a result.)"""
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.buffers = []
        self.msg_queue_offsets = []

    def set_span(self, span: memoryview, sizes: list[int]) -> None:
        """The records are ``span``, back to back, of these sizes."""
        self.span = span
        self.buffers = BackToBack(span, sizes)

    @property
    def body(self) -> bytes:
        if self.span is not None:
            return bytes(self.span)
        return b"".join(self.buffers)


class BackToBack(Sequence[memoryview]):
    """The records of one view of back-to-back records, cut (zero-copy) on first use: the records a result hands
    to whoever reads them one by one (POP, the transaction check, tests) while a pull takes the span whole."""

    __slots__ = ("span", "sizes", "_records")

    def __init__(self, span: memoryview, sizes: list[int]) -> None:
        self.span = span
        self.sizes = sizes
        self._records: list[memoryview] | None = None

    def records(self) -> list[memoryview]:
        records = self._records
        if records is None:
            records = []
            start = 0
            for size in self.sizes:
                records.append(self.span[start : start + size])
                start += size
            self._records = records
        return records

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, index):  # noqa: ANN001, ANN204 - int or slice, as a list's
        return self.records()[index]

    def __iter__(self) -> Iterator[memoryview]:
        return iter(self.records())

    def __repr__(self) -> str:
        return f"BackToBack({len(self.sizes)} records, {len(self.span)} bytes)"


@dataclass(slots=True)
class QueryMessageResult:
    buffers: list[memoryview] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
    buffer_total_size: int = 0

    @property
    def message_count(self) -> int:
        return len(self.buffers)

    @property
    def body(self) -> bytes:
        return b"".join(self.buffers)


@runtime_checkable
class MessageFilter(Protocol):
    """Upstream MessageFilter. A filter may also offer `tags_code_set() -> Collection[int] | None`
    (None = everything matches by consume queue); the store then filters the tags column with numpy
    instead of calling `is_matched_by_consume_queue` per entry."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: memoryview, properties: dict | None) -> bool: ...


@dataclass(frozen=True, slots=True)
class TagsMessageFilter:
    """The J TAG filter: `code_set` None means "*" (all). Vectorisable."""

    code_set: frozenset[int] | None = None

    def tags_code_set(self) -> frozenset[int] | None:
        return self.code_set

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        if self.code_set is None:
            return True
        # J compares (int) tagsCode: the low 32 bits as a signed int
        low = tags_code & 0xFFFFFFFF
        return (low - 0x100000000 if low & 0x80000000 else low) in self.code_set

    def is_matched_by_commit_log(self, record: memoryview, properties: dict | None) -> bool:
        return True
