"""Build outcome tables by hand so the scorer can be checked against known answers."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from bench.outcomes import OutcomeBuffer

T0 = 1_700_000_000_000


def send(
    buf: OutcomeBuffer,
    seq: int,
    *,
    producer: str = "t0-p0",
    topic: str = "T",
    queue: int = 0,
    offset: int | None = None,
    t: int | None = None,
    latency_ms: float = 2.0,
    status: str = "SEND_OK",
    kind: str | None = None,
    code: int | None = None,
    attempts: int = 1,
    warmup: bool = False,
    size: int = 100,
) -> None:
    t = T0 + seq * 10 if t is None else t
    stored = status not in ("FAILED", "ONEWAY")
    buf.add(
        "send",
        topic=topic,
        producer=producer,
        seq=seq,
        warmup=warmup,
        queue_id=queue,
        send_ms=t,
        ack_ms=t + int(latency_ms),
        latency_us=int(latency_ms * 1000),
        status=status,
        error_kind=kind,
        error_code=code,
        queue_offset=(seq if offset is None else offset) if stored else None,
        attempts=attempts,
        size=size,
    )


def consume(
    buf: OutcomeBuffer,
    seq: int,
    *,
    producer: str = "t0-p0",
    topic: str = "T",
    queue: int = 0,
    offset: int | None = None,
    group: str = "G",
    t: int | None = None,
    e2e_ms: int = 5,
    born: int | None = None,
    size: int = 100,
) -> None:
    born = T0 + seq * 10 if born is None else born
    buf.add(
        "consume",
        topic=topic,
        producer=producer,
        seq=seq,
        queue_id=queue,
        queue_offset=seq if offset is None else offset,
        group=group,
        consumer="c0",
        send_ms=born,
        consume_ms=(born + e2e_ms) if t is None else t,
        size=size,
    )


def write(buf: OutcomeBuffer, path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(buf.table(), path / "part-0.parquet")
    return path
