"""The scoring job on hand-made outcome tables with known answers."""

from __future__ import annotations

import json

import pytest

from bench.outcomes import OutcomeBuffer
from bench.score import score_outcomes, write_score
from bench_synth import T0, consume, send, write


def _score(spark, tmp_path, buf, meta=None):
    path = write(buf, tmp_path / "outcomes")
    return score_outcomes(spark, path, meta)


def test_clean_run_counts_and_percentiles(spark, tmp_path):
    buf = OutcomeBuffer()
    # 100 messages, publish latency 1..100 ms, e2e 10 ms, all consumed once.
    for i in range(100):
        send(buf, i, latency_ms=i + 1, queue=i % 4, offset=i // 4)
        consume(buf, i, queue=i % 4, offset=i // 4, e2e_ms=10)
    res = _score(spark, tmp_path, buf)
    c = res.score["counts"]
    assert c["sent"] == 100 and c["acked"] == 100 and c["failed"] == 0 and c["accounted"]
    assert c["lost"] == 0 and c["duplicated"] == 0 and c["out_of_order"] == 0
    lat = res.score["publish"]["latency_ms"]
    assert lat["p50"] == pytest.approx(50.5, abs=0.01)
    assert lat["p99"] == pytest.approx(99.01, abs=0.01)
    assert lat["max"] == pytest.approx(100.0)
    assert res.score["end_to_end"]["latency_ms"]["p50"] == pytest.approx(10.0)
    # sends span 0..990 ms + last latency 100 ms → window 1.09 s
    assert res.score["publish"]["rate_msg_s"] == pytest.approx(100 / 1.09, rel=1e-3)
    assert res.score["backlog"]["final"] == 0


def test_lost_duplicate_and_out_of_order_detection(spark, tmp_path):
    buf = OutcomeBuffer()
    for i in range(10):
        send(buf, i, offset=i)
    for i in range(10):
        if i == 3:
            continue  # lost
        consume(buf, i, offset=i)
    consume(buf, 5, offset=5, t=T0 + 999)  # consumer redelivery of the same record
    # seq 7 stored a second time at offset 10 (a retry after a timed-out first attempt): delivered
    # after seq 9 → one duplicate and one out-of-order delivery.
    consume(buf, 7, offset=10)
    res = _score(spark, tmp_path, buf)
    c = res.score["counts"]
    assert c["lost"] == 1
    assert res.score["lost_sample"][0]["seq"] == 3
    assert c["consumed"] == 11 and c["consumed_unique"] == 9
    assert c["duplicated"] == 2
    assert c["redelivered"] == 1
    assert c["duplicates_stored"] == 1
    assert c["out_of_order"] == 1


def test_errors_by_kind_busy_and_unacked_delivery(spark, tmp_path):
    buf = OutcomeBuffer()
    send(buf, 0)
    send(buf, 1, status="FAILED", kind="TIMEOUT_CLEAN_QUEUE", code=2)
    send(buf, 2, status="FAILED", kind="CLIENT_TIMEOUT", code=None, attempts=1)
    send(buf, 3, attempts=2)
    buf.add("attempt", topic="T", producer="t0-p0", seq=3, send_ms=T0, ack_ms=T0 + 5,
            error_kind="PCBUSY_CLEAN_QUEUE", error_code=2)
    send(buf, 4, status="FAILED", kind="REJECTREQUEST", code=2)
    for i in (0, 2, 3):  # seq 2 failed at the client but the broker stored it
        consume(buf, i)
    res = _score(spark, tmp_path, buf)
    c = res.score["counts"]
    assert (c["sent"], c["acked"], c["failed"]) == (5, 2, 3) and c["accounted"]
    assert c["retries"] == 1
    assert c["delivered_unacked"] == 1
    e = res.score["errors"]
    assert e["final_by_kind"] == {"CLIENT_TIMEOUT": 1, "REJECTREQUEST": 1, "TIMEOUT_CLEAN_QUEUE": 1}
    assert e["retried_by_kind"] == {"PCBUSY_CLEAN_QUEUE": 1}
    assert e["busy"] == {"PCBUSY_CLEAN_QUEUE": 1, "REJECTREQUEST": 1, "TIMEOUT_CLEAN_QUEUE": 1}
    assert e["busy_total"] == 3


def test_groups_each_expected_to_consume_and_backlog(spark, tmp_path):
    buf = OutcomeBuffer()
    for i in range(6):
        send(buf, i, t=T0 + i * 100)
        consume(buf, i, group="A", t=T0 + 3000 + i)  # A drains after the load
    for i in range(4):
        consume(buf, i, group="B", t=T0 + 100 * i + 50)  # B misses two
    meta = {"groups": {"T": ["A", "B", "C"]}, "load_start_ms": T0}
    res = _score(spark, tmp_path, buf, meta)
    # C consumed nothing: all 6 lost for C, 2 for B.
    assert res.score["counts"]["lost"] == 8
    assert res.score["backlog"]["max"] >= 6 * 3 - 4 - 0
    assert res.score["backlog"]["final"] == 8
    assert res.score["backlog"]["drain_time_s"] == pytest.approx(3.005 - 0.502, abs=0.01)
    assert res.series["second"][0] == 0


def test_warmup_excluded_from_latency_but_not_accounting(spark, tmp_path):
    buf = OutcomeBuffer()
    for i in range(10):
        send(buf, i, warmup=i < 5, latency_ms=1000 if i < 5 else 1)
        consume(buf, i)
    res = _score(spark, tmp_path, buf)
    assert res.score["publish"]["latency_ms"]["max"] == pytest.approx(1.0)
    assert res.score["counts"]["acked"] == 10 and res.score["counts"]["lost"] == 0


def test_empty_consumption_and_write(spark, tmp_path):
    buf = OutcomeBuffer()
    send(buf, 0)
    res = _score(spark, tmp_path, buf)
    assert res.score["counts"]["lost"] == 0  # no group known, nothing expected
    assert res.score["end_to_end"]["latency_ms"]["p50"] is None
    score_path, series_path = write_score(res, tmp_path / "out")
    assert json.loads(score_path.read_text())["counts"]["sent"] == 1
    assert "second" in json.loads(series_path.read_text())
