"""The scoring job on hand-made outcome tables with known answers (three Spark scorings in all)."""

from __future__ import annotations

import json

import pytest
from bench_synth import T0, consume, send, write

from bench.outcomes import OutcomeBuffer
from bench.score import score_outcomes, write_score


def _score(spark, tmp_path, buf, meta=None):
    path = write(buf, tmp_path / "outcomes")
    return score_outcomes(spark, path, meta)


def test_clean_run_counts_percentiles_rates_and_series(spark, tmp_path):
    buf = OutcomeBuffer()
    buf.add("start", send_ms=T0 - 5, ack_ms=T0 + 1000)
    # 100 messages, publish latency 1..100 ms, e2e 10 ms, all consumed once.
    for i in range(100):
        send(buf, i, latency_ms=i + 1, queue=i % 4, offset=i // 4)
        consume(buf, i, queue=i % 4, offset=i // 4, e2e_ms=10)
    buf.add("fault", send_ms=T0 + 995, ack_ms=T0 + 996, error_kind="stall_append", status="OK", broker="b")
    res = _score(spark, tmp_path, buf)
    c = res.score["counts"]
    assert c["sent"] == 100 and c["acked"] == 100 and c["failed"] == 0 and c["accounted"]
    assert c["lost"] == 0 and c["duplicated"] == 0 and c["out_of_order"] == 0 and c["retries"] == 0
    lat = res.score["publish"]["latency_ms"]
    assert lat["p50"] == pytest.approx(50.5, abs=0.01)
    assert lat["p99"] == pytest.approx(99.01, abs=0.01)
    assert lat["max"] == pytest.approx(100.0)
    assert res.score["end_to_end"]["latency_ms"]["p50"] == pytest.approx(10.0)
    # sends span 0..990 ms + last latency 100 ms → window 1.09 s
    assert res.score["publish"]["rate_msg_s"] == pytest.approx(100 / 1.09, rel=1e-3)
    assert res.score["backlog"]["final"] == 0
    # the series starts at the tasks' agreed start, and a fault keeps its exact time
    assert res.series["t0_ms"] == T0 - 5
    assert sum(res.series["acked"]) == 100 and sum(res.series["consumed"]) == 100
    assert res.series["faults"][0]["kind"] == "stall_append"
    assert res.series["faults"][0]["t"] == pytest.approx(1.0)
    score_path, series_path = write_score(res, tmp_path / "out")
    assert json.loads(score_path.read_text())["counts"]["sent"] == 100
    assert json.loads(series_path.read_text())["second"][0] == 0


def test_planted_problems_each_counted_once(spark, tmp_path):
    """One table, one producer per planted problem, so each total has exactly one cause."""
    buf = OutcomeBuffer()
    # "lost": seq 3 acked, never consumed.
    for i in range(10):
        send(buf, i, producer="lost", offset=i)
        if i != 3:
            consume(buf, i, producer="lost", offset=i)
    # "redeliver": seq 1 delivered twice from the same record.
    for i in range(3):
        send(buf, i, producer="redeliver", topic="R", offset=i)
        consume(buf, i, producer="redeliver", topic="R", offset=i)
    consume(buf, 1, producer="redeliver", topic="R", offset=1, t=T0 + 999)
    # "retried": seq 1 stored twice (first attempt timed out but landed, retry stored again at
    # offset 3, after seq 2) → one duplicate, one stored copy, one out-of-order delivery.
    for i in range(3):
        send(buf, i, producer="retried", topic="D", offset=i if i != 1 else 3, attempts=2 if i == 1 else 1)
        consume(buf, i, producer="retried", topic="D", offset=i)
    consume(buf, 1, producer="retried", topic="D", offset=3)
    buf.add("attempt", topic="D", producer="retried", seq=1, send_ms=T0, ack_ms=T0 + 3000, error_kind="CLIENT_TIMEOUT")
    # "errors": busy answers, final and retried, and a failed send the broker stored anyway.
    send(buf, 0, producer="errors", topic="E")
    send(buf, 1, producer="errors", topic="E", status="FAILED", kind="TIMEOUT_CLEAN_QUEUE", code=2)
    send(buf, 2, producer="errors", topic="E", status="FAILED", kind="CLIENT_TIMEOUT")
    send(buf, 3, producer="errors", topic="E", attempts=2)
    buf.add(
        "attempt",
        topic="E",
        producer="errors",
        seq=3,
        send_ms=T0,
        ack_ms=T0 + 5,
        error_kind="PCBUSY_CLEAN_QUEUE",
        error_code=2,
    )
    send(buf, 4, producer="errors", topic="E", status="FAILED", kind="REJECTREQUEST", code=2)
    for i in (0, 2, 3):
        consume(buf, i, producer="errors", topic="E")
    # "warm": warm-up sends are slow but excluded from latency; still accounted.
    for i in range(4):
        send(buf, i, producer="warm", topic="W", warmup=i < 2, latency_ms=5000 if i < 2 else 1)
        consume(buf, i, producer="warm", topic="W")

    res = _score(spark, tmp_path, buf)
    c = res.score["counts"]
    assert c["accounted"]
    assert (c["sent"], c["failed"]) == (10 + 3 + 3 + 5 + 4, 3)
    assert c["lost"] == 1
    assert res.score["lost_sample"] == [{"producer": "lost", "seq": 3, "group": "G", "topic": "T"}]
    assert c["duplicated"] == 2  # one redelivery + one stored twice
    assert c["redelivered"] == 1
    assert c["duplicates_stored"] == 1
    assert c["out_of_order"] == 1
    assert c["delivered_unacked"] == 1
    assert c["retries"] == 2
    e = res.score["errors"]
    assert e["final_by_kind"] == {"CLIENT_TIMEOUT": 1, "REJECTREQUEST": 1, "TIMEOUT_CLEAN_QUEUE": 1}
    assert e["retried_by_kind"] == {"CLIENT_TIMEOUT": 1, "PCBUSY_CLEAN_QUEUE": 1}
    assert e["busy"] == {"PCBUSY_CLEAN_QUEUE": 1, "REJECTREQUEST": 1, "TIMEOUT_CLEAN_QUEUE": 1}
    assert e["busy_total"] == 3
    assert res.score["publish"]["latency_ms"]["max"] == pytest.approx(2.0)  # warm-up's 5 s excluded


def test_every_group_must_see_every_message_backlog_and_drain(spark, tmp_path):
    buf = OutcomeBuffer()
    for i in range(6):
        send(buf, i, t=T0 + i * 100)
        consume(buf, i, group="A", t=T0 + 3000 + i)  # A drains after the load
    for i in range(4):
        consume(buf, i, group="B", t=T0 + 100 * i + 50)  # B misses two
    buf.add("drain", consumer="c", group="B", topic="T", status="timeout", consume_ms=T0 + 4000)
    buf.add(
        "sample",
        consumer="c",
        group="A",
        topic="T",
        consume_ms=T0 + 10,
        cache_msgs=7,
        cache_bytes=700,
        rss_bytes=10_000,
    )
    meta = {"groups": {"T": ["A", "B", "C"]}, "load_start_ms": T0}
    res = _score(spark, tmp_path, buf, meta)
    # C consumed nothing: all 6 unconsumed by C, 2 by B; B's drain timed out, so "lost" is unknown
    assert res.score["counts"]["unconsumed"] == 8 and res.score["counts"]["lost"] is None
    assert res.score["backlog"]["final"] == 8
    assert res.score["backlog"]["max"] == 14  # second 0: 6 acked × 3 groups − 4 consumed
    assert res.score["backlog"]["drain_time_s"] == pytest.approx(3.005 - 0.502, abs=0.01)
    assert res.score["backlog"]["drain_complete"] is False
    assert res.score["client"] == {"peak_cache_bytes": 700, "peak_cache_msgs": 7, "peak_rss_bytes": 10_000}
