"""The scoring job: a Spark job over the outcome table that produces ``score.json`` and ``series.json``.

What a score holds follows OpenMessaging Benchmark (publish/consume rates, publish and end-to-end
latency percentiles, backlog) and OpenMessaging Chaos (lost, duplicated, out-of-order), plus the
RocketMQ busy answers by kind. Definitions (each per consumer group, since every group must see
every message of its topic):

* lost            acked (stored) messages a group never consumed — once every consumer drained;
                  after a drain timeout ``lost`` is None and ``unconsumed`` counts them.
* duplicated      deliveries beyond the first of a message (``producer``, ``seq``) to a group.
* redelivered     deliveries of a stored record (same queue and offset) beyond the first.
* duplicates_stored  extra stored copies of one message (a retry after the first try was stored).
* delivered_unacked  messages the producer saw fail that were stored and consumed anyway.
* out_of_order    deliveries whose ``seq`` is lower than one already delivered from the same
                  producer on the same queue (first delivery of each offset, in offset order).
* backlog         acked × groups − first deliveries, per second; drain time = last first delivery
                  after the last ack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.outcomes import STATUS_FAILED, STATUS_ONEWAY, STORED_STATUSES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PERCENTILES = (("p50", 0.5), ("p75", 0.75), ("p95", 0.95), ("p99", 0.99), ("p99_9", 0.999))
MIB = 1024 * 1024
BUSY_KINDS = ("REJECTREQUEST", "OVERLOAD", "PCBUSY_CLEAN_QUEUE", "TIMEOUT_CLEAN_QUEUE", "PC_SYNCHRONIZED")


@dataclass
class ScoreResult:
    score: dict[str, Any]
    series: dict[str, Any]


def _latency_block(row: Any, prefix: str, scale: float) -> dict[str, float | None]:
    """Percentiles (+ mean, max) from one aggregate row, in milliseconds."""
    pct = getattr(row, f"{prefix}_pct")
    out: dict[str, float | None] = {}
    for i, (name, _) in enumerate(PERCENTILES):
        out[name] = None if pct is None else round(float(pct[i]) * scale, 3)
    mean = getattr(row, f"{prefix}_mean")
    mx = getattr(row, f"{prefix}_max")
    out["mean"] = None if mean is None else round(float(mean) * scale, 3)
    out["max"] = None if mx is None else round(float(mx) * scale, 3)
    return out


def score_outcomes(
    spark: SparkSession, outcomes: str | Path | DataFrame, meta: dict[str, Any] | None = None
) -> ScoreResult:
    """Score one run. ``outcomes`` is a Parquet path (or a DataFrame with the outcome schema)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    meta = dict(meta or {})
    df = spark.read.parquet(str(outcomes)) if isinstance(outcomes, str | Path) else outcomes
    df = df.cache()
    sends = df.filter(F.col("event") == "send")
    attempts = df.filter(F.col("event") == "attempt")
    consumes = df.filter(F.col("event") == "consume")
    stored = F.col("status").isin(*STORED_STATUSES)
    measured = stored & ~F.coalesce(F.col("warmup"), F.lit(False))
    pcts = F.array(*[F.lit(p) for _, p in PERCENTILES])

    # Send totals and the run's start rows in one pass over the table.
    is_send = F.col("event") == "send"
    is_start = F.col("event") == "start"
    stored_send = is_send & stored
    measured_send = is_send & measured
    s = df.agg(
        F.sum(is_send.cast("long")).alias("sent"),
        F.sum(stored_send.cast("long")).alias("acked"),
        F.sum((is_send & (F.col("status") == STATUS_FAILED)).cast("long")).alias("failed"),
        F.sum((is_send & (F.col("status") == STATUS_ONEWAY)).cast("long")).alias("oneway"),
        F.sum(F.when(is_send, F.greatest(F.col("attempts") - 1, F.lit(0)))).alias("retries"),
        F.sum(measured_send.cast("long")).alias("measured"),
        F.sum(F.when(measured_send, F.col("size")).otherwise(0)).alias("measured_bytes"),
        F.min(F.when(measured_send, F.col("send_ms"))).alias("m_first_send"),
        F.max(F.when(measured_send, F.col("ack_ms"))).alias("m_last_ack"),
        F.min(F.when(is_send, F.col("send_ms"))).alias("first_send"),
        F.max(F.when(stored_send, F.col("ack_ms"))).alias("last_ack"),
        F.max(F.when(is_send, F.col("send_ms"))).alias("last_send"),
        F.min(F.when(is_start, F.col("send_ms"))).alias("start_t0"),
        F.max(F.when(is_start, F.col("ack_ms"))).alias("start_end"),
        F.percentile(F.when(measured_send, F.col("latency_us")), pcts).alias("pub_pct"),
        F.avg(F.when(measured_send, F.col("latency_us"))).alias("pub_mean"),
        F.max(F.when(measured_send, F.col("latency_us"))).alias("pub_max"),
    ).first()

    # ---- consumption, one row per (group, message) ---------------------------------------------
    msg_key = ["group", "topic", "producer", "seq"]
    cons_msg = consumes.groupBy(*msg_key).agg(
        F.count(F.lit(1)).alias("n"),
        F.min("consume_ms").alias("first_ms"),
        F.min("send_ms").alias("born_ms"),
        F.max("size").alias("c_size"),
        F.min("warmup").alias("c_warmup"),
    )
    # Groups expected to see each topic: from the run's metadata, else whoever consumed it.
    groups_meta = meta.get("groups")
    if groups_meta:
        groups_df = spark.createDataFrame(
            [(t, g) for t, gs in groups_meta.items() for g in gs], "topic string, group string"
        )
    else:
        groups_df = consumes.select("topic", "group").distinct()
    expected = sends.select("topic", "producer", "seq", "status", F.col("warmup").alias("s_warmup")).join(
        groups_df, "topic"
    )
    per_msg = expected.join(cons_msg, msg_key, "full_outer")
    seen = F.col("n").isNotNull()
    is_lost = seen.__invert__() & F.col("status").isin(*STORED_STATUSES)
    e2e = F.col("first_ms") - F.col("born_ms")
    e2e_measured = seen & ~F.coalesce(F.col("s_warmup"), F.col("c_warmup"), F.lit(False))
    c = per_msg.agg(
        F.sum(is_lost.cast("long")).alias("lost"),
        F.slice(
            F.array_sort(F.collect_list(F.when(is_lost, F.struct("producer", "seq", "group", "topic")))), 1, 20
        ).alias("lost_sample"),
        F.sum((~seen & (F.col("status") == STATUS_ONEWAY)).cast("long")).alias("oneway_unseen"),
        F.sum(seen.cast("long")).alias("consumed_unique"),
        F.sum("n").alias("consumed"),
        F.sum(F.when(seen, F.col("c_size").cast("long"))).alias("consumed_bytes"),
        F.min("first_ms").alias("first_consume"),
        F.max("first_ms").alias("last_consume"),
        F.sum((seen & (F.col("status") == STATUS_FAILED)).cast("long")).alias("delivered_unacked"),
        F.sum((seen & F.col("status").isNull()).cast("long")).alias("unknown_consumed"),
        F.percentile(F.when(e2e_measured, e2e), pcts).alias("e2e_pct"),
        F.avg(F.when(e2e_measured, e2e)).alias("e2e_mean"),
        F.max(F.when(e2e_measured, e2e)).alias("e2e_max"),
    ).first()

    # Out of order: each stored record once, in queue-offset order, per producer and queue.
    records = consumes.groupBy("group", "topic", "queue_id", "queue_offset").agg(
        F.min("producer").alias("producer"), F.min("seq").alias("seq")
    )
    order_w = (
        Window.partitionBy("group", "topic", "queue_id", "producer")
        .orderBy("queue_offset")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    prev_max = F.max("seq").over(order_w)
    rec = (
        records.withColumn("_prev_max", prev_max)
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.sum((F.col("_prev_max").isNotNull() & (F.col("seq") < F.col("_prev_max"))).cast("long")).alias("ooo"),
        )
        .first()
    )
    ooo, n_records = int(rec["ooo"] or 0), int(rec["records"] or 0)

    # ---- per-second series, errors, samples, drain and faults: one job -------------------------------
    t0 = meta.get("load_start_ms") or s["start_t0"] or s["first_send"] or c["first_consume"] or 0
    planned_end = s["start_end"]
    sec = lambda col: F.floor((F.col(col) - F.lit(t0)) / 1000).cast("long")  # noqa: E731
    nul = F.lit(None)

    def part(
        frame: DataFrame,
        series: str,
        kind: Any,
        t: Any,
        size: Any = nul,
        lat: Any = nul,
        cache: Any = nul,
        rss: Any = nul,
        label: Any = nul,
    ) -> DataFrame:
        return frame.select(
            F.lit(series).alias("series"),
            kind.cast("string").alias("kind"),
            t.alias("t"),
            size.cast("long").alias("size"),
            lat.cast("double").alias("lat"),
            cache.cast("long").alias("cache"),
            rss.cast("long").alias("rss"),
            label.cast("string").alias("label"),
        )

    failed_rows = sends.filter(F.col("status") == STATUS_FAILED)
    events = (
        part(sends, "sent", nul, sec("send_ms"))
        .unionByName(
            part(sends.filter(stored), "acked", nul, sec("ack_ms"), F.col("size"), F.col("latency_us") / 1000.0)
        )
        .unionByName(
            part(cons_msg, "consumed", nul, sec("first_ms"), F.col("c_size"), F.col("first_ms") - F.col("born_ms"))
        )
        .unionByName(part(failed_rows, "err_final", F.coalesce(F.col("error_kind"), F.lit("UNKNOWN")), sec("ack_ms")))
        .unionByName(part(attempts, "err_retry", F.coalesce(F.col("error_kind"), F.lit("UNKNOWN")), sec("ack_ms")))
        .unionByName(
            part(
                df.filter(F.col("event") == "sample"),
                "sample",
                nul,
                sec("consume_ms"),
                cache=F.col("cache_bytes"),
                rss=F.col("rss_bytes"),
                lat=F.col("cache_msgs"),
            )
        )
        .unionByName(part(df.filter(F.col("event") == "drain"), "drain", F.col("status"), F.lit(0)))
        .unionByName(
            part(
                df.filter(F.col("event") == "fault"),
                "fault",
                F.col("error_kind"),
                sec("send_ms"),
                lat=(F.col("send_ms") - F.lit(t0)) / 1000.0,
                label=F.concat_ws(" ", F.col("status"), F.col("remark")),
            )
        )
    )
    rows = (
        events.groupBy("series", "kind", "t")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("size").alias("bytes"),
            F.percentile_approx("lat", F.array(F.lit(0.5), F.lit(0.99)), 1000).alias("pct"),
            F.max("lat").alias("lat_max"),
            F.max("cache").alias("cache"),
            F.max("rss").alias("rss"),
            F.max("label").alias("label"),
        )
        .collect()
    )
    df.unpersist()

    by_series: dict[str, dict[Any, Any]] = {}
    for r in rows:
        by_series.setdefault(r["series"], {})[(r["kind"], r["t"])] = r

    def flat(name: str) -> dict[int, Any]:
        return {t: r for (k, t), r in by_series.get(name, {}).items() if t is not None}

    ser_sent, ser_acked, ser_cons, ser_samp = flat("sent"), flat("acked"), flat("consumed"), flat("sample")
    by_kind: dict[str, int] = {}
    attempts_by_kind: dict[str, int] = {}
    ser_err: dict[str, dict[int, int]] = {}
    for name, target in (("err_final", by_kind), ("err_retry", attempts_by_kind)):
        for (kind, t), r in by_series.get(name, {}).items():
            target[kind] = target.get(kind, 0) + r["n"]
            if t is not None:
                ser_err.setdefault(kind, {})
                ser_err[kind][t] = ser_err[kind].get(t, 0) + r["n"]
    every_by_kind = dict(by_kind)
    for k, v in attempts_by_kind.items():
        every_by_kind[k] = every_by_kind.get(k, 0) + v
    busy = {k: v for k, v in every_by_kind.items() if k in BUSY_KINDS}
    drain_counts = {kind: r["n"] for (kind, _), r in by_series.get("drain", {}).items()}
    faults = sorted(
        (
            {"t": r["lat_max"], "kind": kind, "count": r["n"], "answer": r["label"]}
            for (kind, t), r in by_series.get("fault", {}).items()
        ),
        key=lambda f: f["t"] or 0,
    )
    samp_cache = [r["cache"] for r in ser_samp.values() if r["cache"] is not None]
    samp_msgs = [r["lat_max"] for r in ser_samp.values() if r["lat_max"] is not None]
    samp_rss = [r["rss"] for r in ser_samp.values() if r["rss"] is not None]

    keys = set(ser_sent) | set(ser_acked) | set(ser_cons) | set(ser_samp)
    for d in ser_err.values():
        keys |= set(d)
    seconds = list(range(min(keys), max(keys) + 1)) if keys else []
    n_groups = len(next(iter(groups_meta.values()))) if groups_meta else 1
    backlog, cum_a, cum_c = [], 0, 0
    for t in seconds:
        cum_a += ser_acked[t]["n"] if t in ser_acked else 0
        cum_c += ser_cons[t]["n"] if t in ser_cons else 0
        backlog.append(cum_a * max(1, n_groups) - cum_c)

    def pct_at(d: dict[int, Any], t: int, i: int) -> float | None:
        r = d.get(t)
        return None if r is None or r["pct"] is None else round(float(r["pct"][i]), 3)

    def val(d: dict[int, Any], t: int, key: str, default: Any = 0) -> Any:
        r = d.get(t)
        return default if r is None or r[key] is None else r[key]

    series = {
        "t0_ms": t0,
        "second": seconds,
        "sent": [val(ser_sent, t, "n") for t in seconds],
        "acked": [val(ser_acked, t, "n") for t in seconds],
        "acked_bytes": [val(ser_acked, t, "bytes") for t in seconds],
        "consumed": [val(ser_cons, t, "n") for t in seconds],
        "consumed_bytes": [val(ser_cons, t, "bytes") for t in seconds],
        "publish_p50_ms": [pct_at(ser_acked, t, 0) for t in seconds],
        "publish_p99_ms": [pct_at(ser_acked, t, 1) for t in seconds],
        "e2e_p50_ms": [pct_at(ser_cons, t, 0) for t in seconds],
        "e2e_p99_ms": [pct_at(ser_cons, t, 1) for t in seconds],
        "errors": {k: [d.get(t, 0) for t in seconds] for k, d in sorted(ser_err.items())},
        "backlog": backlog,
        "cache_bytes": [val(ser_samp, t, "cache", None) for t in seconds],
        "rss_bytes": [val(ser_samp, t, "rss", None) for t in seconds],
        "faults": faults,
    }

    # ---- the score ---------------------------------------------------------------------------------
    sent, acked, failed, oneway = (
        int(s["sent"] or 0),
        int(s["acked"] or 0),
        int(s["failed"] or 0),
        int(s["oneway"] or 0),
    )
    pub_window_s = (
        (s["m_last_ack"] - s["m_first_send"]) / 1000.0
        if s["m_first_send"] is not None and s["m_last_ack"] is not None
        else 0.0
    )
    cons_window_s = (c["last_consume"] - c["first_consume"]) / 1000.0 if c["first_consume"] is not None else 0.0
    load_end = meta.get("load_end_ms") or s["last_ack"] or s["last_send"] or planned_end
    drain_time_s = (
        round(max(0.0, (c["last_consume"] - load_end) / 1000.0), 3)
        if c["last_consume"] is not None and load_end is not None
        else None
    )
    consumed_unique = int(c["consumed_unique"] or 0)
    consumed_rows = int(c["consumed"] or 0)

    def rate(n: float, window: float) -> float | None:
        return round(n / window, 3) if window > 0 else None

    score: dict[str, Any] = {
        "schema": 1,
        "scenario": meta.get("scenario", {}),
        "run": {k: meta.get(k) for k in ("run_id", "driver", "master", "namesrv", "tasks", "started_at") if k in meta},
        "counts": {
            "sent": sent,
            "acked": acked,
            "failed": failed,
            "oneway": oneway,
            "accounted": acked + failed + oneway == sent,
            "retries": int(s["retries"] or 0),
            "consumed": int(consumed_rows),
            "consumed_unique": consumed_unique,
            # Acked but never consumed is a loss only if the consumers finished draining; after a
            # drain timeout it may just be backlog, so "lost" is unknown (None) and "unconsumed" says how many.
            "unconsumed": int(c["lost"] or 0),
            "lost": int(c["lost"] or 0) if drain_counts.get("timeout", 0) == 0 else None,
            "oneway_unseen": int(c["oneway_unseen"] or 0),
            "duplicated": consumed_rows - consumed_unique,
            # deliveries beyond one per stored record: consumer-side redelivery; more stored records
            # than messages: a message stored twice (a retry after an attempt that did land)
            "redelivered": consumed_rows - n_records,
            "duplicates_stored": n_records - consumed_unique,
            "delivered_unacked": int(c["delivered_unacked"] or 0),
            "unknown_consumed": int(c["unknown_consumed"] or 0),
            "out_of_order": int(ooo),
        },
        "publish": {
            "rate_msg_s": rate(s["measured"] or 0, pub_window_s),
            "rate_mib_s": (round((s["measured_bytes"] or 0) / MIB / pub_window_s, 3) if pub_window_s > 0 else None),
            "window_s": round(pub_window_s, 3),
            "latency_ms": _latency_block(s, "pub", 1e-3),
        },
        "consume": {
            "rate_msg_s": rate(consumed_unique, cons_window_s),
            "rate_mib_s": (round((c["consumed_bytes"] or 0) / MIB / cons_window_s, 3) if cons_window_s > 0 else None),
            "window_s": round(cons_window_s, 3),
        },
        "end_to_end": {"latency_ms": _latency_block(c, "e2e", 1.0)},
        "errors": {
            "final_by_kind": dict(sorted(by_kind.items())),
            "retried_by_kind": dict(sorted(attempts_by_kind.items())),
            "all_by_kind": dict(sorted(every_by_kind.items())),
            "busy": dict(sorted(busy.items())),
            "busy_total": int(sum(busy.values())),
        },
        "backlog": {
            "max": max(backlog) if backlog else 0,
            "final": backlog[-1] if backlog else 0,
            "drain_time_s": drain_time_s,
            "drain_complete": drain_counts.get("timeout", 0) == 0,
            "drain": drain_counts,
        },
        "client": {
            "peak_cache_bytes": max(samp_cache, default=None),
            "peak_cache_msgs": int(max(samp_msgs)) if samp_msgs else None,
            "peak_rss_bytes": max(samp_rss, default=None),
        },
        "broker": meta.get("broker", {}),
        "faults": faults,
        "lost_sample": [r.asDict() for r in (c["lost_sample"] or [])],
    }
    return ScoreResult(score=score, series=series)


def write_score(result: ScoreResult, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    score_path = out_dir / "score.json"
    series_path = out_dir / "series.json"
    score_path.write_text(json.dumps(result.score, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    series_path.write_text(json.dumps(result.series, default=str) + "\n", encoding="utf-8")
    return score_path, series_path
