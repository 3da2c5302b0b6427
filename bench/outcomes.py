"""The outcome table: one row per message event, the contract between load workers and the scorer.

Row kinds (``event``):
  * ``send``    the final outcome of one message: first-attempt time, ack time, status or error.
  * ``attempt`` one failed attempt that was retried (so busy answers hidden by retries still count).
  * ``consume`` one delivery of a message to a consumer (duplicates give several rows).
  * ``sample``  a periodic client gauge: cached messages/bytes of a consumer, process RSS.
  * ``fault``   a FAULT_INJECT request the run sent (time, kind, answer).
  * ``drain``   whether a consumer caught up with every queue it owned before its drain deadline.
  * ``start``   one per task: the agreed load start (``send_ms``) and planned load end (``ack_ms``).

Times are wall-clock milliseconds; publish latency is measured on the monotonic clock (``latency_us``).
The Parquet schema is fixed here and written by every driver, so scoring never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

# Final send statuses that mean "the broker stored it" (protocol §3: 0, 10, 11, 12).
STORED_STATUSES = ("SEND_OK", "FLUSH_DISK_TIMEOUT", "SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT")
STATUS_FAILED = "FAILED"
STATUS_ONEWAY = "ONEWAY"  # written to the socket; the broker never answers a oneway request

SCHEMA = pa.schema(
    [
        ("event", pa.string()),
        ("worker", pa.int32()),
        ("topic", pa.string()),
        ("producer", pa.string()),
        ("seq", pa.int64()),
        ("warmup", pa.bool_()),
        ("queue_id", pa.int32()),
        ("broker", pa.string()),
        ("send_ms", pa.int64()),
        ("ack_ms", pa.int64()),
        ("latency_us", pa.int64()),
        ("status", pa.string()),
        ("error_kind", pa.string()),
        ("error_code", pa.int32()),
        ("remark", pa.string()),
        ("msg_id", pa.string()),
        ("uniq_key", pa.string()),
        ("queue_offset", pa.int64()),
        ("attempts", pa.int32()),
        ("size", pa.int32()),
        ("consumer", pa.string()),
        ("group", pa.string()),
        ("consume_ms", pa.int64()),
        ("store_ms", pa.int64()),
        ("cache_msgs", pa.int64()),
        ("cache_bytes", pa.int64()),
        ("rss_bytes", pa.int64()),
    ]
)

COLUMNS = tuple(SCHEMA.names)
_COLUMN_SET = frozenset(COLUMNS)


def spark_ddl() -> str:
    """The same schema as a Spark DDL string (for ``mapInArrow``)."""
    names = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint", pa.bool_(): "boolean"}
    return ", ".join(f"`{f.name}` {names[f.type]}" for f in SCHEMA)


@dataclass
class OutcomeBuffer:
    """Column-wise appender: cheap per row, turned into Arrow record batches at the end."""

    worker: int = 0
    cols: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in COLUMNS})
    rows: int = 0

    def add(self, event: str, **values: Any) -> None:
        values["event"] = event
        values.setdefault("worker", self.worker)
        if not _COLUMN_SET.issuperset(values):
            raise KeyError(f"not outcome columns: {sorted(set(values) - _COLUMN_SET)}")
        for name, col in self.cols.items():
            col.append(values.get(name))
        self.rows += 1

    def batches(self, max_rows: int = 65536) -> list[pa.RecordBatch]:
        if self.rows == 0:
            return []
        table = pa.Table.from_pydict(self.cols, schema=SCHEMA)
        return table.to_batches(max_chunksize=max_rows)

    def table(self) -> pa.Table:
        return pa.Table.from_pydict(self.cols, schema=SCHEMA)

    def extend(self, other: OutcomeBuffer) -> None:
        for name, col in self.cols.items():
            col.extend(other.cols[name])
        self.rows += other.rows
