"""Live progress over UDP, the run plan, and the report (no Spark involved)."""

from __future__ import annotations

import io
import threading
import time

from bench.progress import ProgressCollector, ProgressSnapshot, format_line
from bench.report import write_report
from bench.run import plan_run, spark_error_message
from bench.scenario import parse_scenario
from bench.worker import LocalBarrier, ProgressReporter, Stats, TaskSpec


def test_workers_report_and_driver_prints_totals():
    out = io.StringIO()
    col = ProgressCollector(interval_s=0.2, out=out).start()
    reps = [ProgressReporter(col.addr, w) for w in range(2)]
    s = Stats(sent=10, acked=9, failed=1, consumed=8)
    s.errors["REJECTREQUEST"] = 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and col.snapshot().workers < 2:
        for r in reps:
            r.report(s, "load")
        time.sleep(0.05)
    time.sleep(0.5)
    snap = col.stop()
    for r in reps:
        r.close()
    assert (snap.sent, snap.acked, snap.failed, snap.consumed) == (20, 18, 2, 16)
    assert snap.errors == {"REJECTREQUEST": 2} and snap.phases == {"load": 2}
    assert "sent=20 acked=18 failed=2 consumed=16" in out.getvalue()
    assert "REJECTREQUEST=2" in out.getvalue()


def test_progress_line_rates():
    prev = ProgressSnapshot(acked=100, consumed=50)
    now = ProgressSnapshot(sent=300, acked=300, consumed=250, phases={"load": 2})
    line = format_line(4.0, now, prev, 2.0)
    assert "pub=100/s" in line and "con=100/s" in line and "load:2" in line


def test_plan_spreads_clients_over_tasks():
    scen = parse_scenario(
        {
            "name": "p",
            "topics": 2,
            "producers_per_topic": 2,
            "subscriptions_per_topic": 2,
            "consumers_per_subscription": 2,
        }
    )
    plan = plan_run(scen, run_id="r1", namesrv="h:1", tasks=3, progress_addr=None)
    assert len(plan.specs) == 3
    assert sum(len(s.producers) for s in plan.specs) == 4
    assert sum(len(s.consumers) for s in plan.specs) == 8
    assert plan.groups == {
        "bench-r1-t0": ["bench-r1-t0-s0", "bench-r1-t0-s1"],
        "bench-r1-t1": ["bench-r1-t1-s0", "bench-r1-t1-s1"],
    }
    assert [s.run_faults for s in plan.specs] == [True, False, False]
    one = plan_run(parse_scenario({"name": "q"}), run_id="r", namesrv="h:1", tasks=8, progress_addr=None)
    assert [(len(s.producers), len(s.consumers)) for s in one.specs] == [(1, 0), (0, 1)]
    spec = plan.specs[1]
    again = TaskSpec.from_json(spec.to_json())
    assert again.producers == spec.producers and again.consumers == spec.consumers
    assert again.load_scenario() == spec.load_scenario()


def test_local_barrier_gathers_every_party():
    b = LocalBarrier(3)
    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda i=i: results.append(b.all_gather(str(i)))) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(results) == 3 and all(sorted(r) == ["0", "1", "2"] for r in results)


def test_spark_error_message_extracts_the_python_error():
    text = (
        "An error occurred while calling o77.parquet.\n: org.apache.spark.SparkException: Job aborted\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n    boom()\nmqclient.errors.NameServerUnreachableError: no name server\n'
        "\tat org.apache.spark.X.y(X.scala:1)\n"
    )
    assert spark_error_message(RuntimeError(text)) == "mqclient.errors.NameServerUnreachableError: no name server"


def test_report_renders_without_spark(tmp_path):
    score = {
        "scenario": {"name": "demo", "send_mode": "async"},
        "run": {"run_id": "r"},
        "counts": {
            "sent": 10,
            "acked": 9,
            "failed": 1,
            "lost": 1,
            "duplicated": 0,
            "out_of_order": 0,
            "accounted": True,
        },
        "publish": {"rate_msg_s": 5.0, "latency_ms": {"p50": 1.0, "p99": 2.0, "max": 3.0}},
        "consume": {},
        "end_to_end": {"latency_ms": {"p50": 4.0}},
        "errors": {"all_by_kind": {"REJECTREQUEST": 3}, "busy": {"REJECTREQUEST": 3}, "busy_total": 3},
        "backlog": {"max": 2},
        "broker": {"started_by_mqbench": True, "boot_time_s": 0.8},
        "client": {},
    }
    series = {
        "second": [0, 1, 2],
        "sent": [5, 5, 0],
        "acked": [4, 5, 0],
        "consumed": [3, 5, 1],
        "publish_p50_ms": [1.0, None, 2.0],
        "publish_p99_ms": [2, 3, None],
        "e2e_p50_ms": [None] * 3,
        "e2e_p99_ms": [None] * 3,
        "errors": {"REJECTREQUEST": [0, 3, 0]},
        "backlog": [1, 1, 0],
        "cache_bytes": [10, 20, None],
        "rss_bytes": [100, 200, 150],
        "faults": [{"t": 0.5, "kind": "stall_append"}],
    }
    path = write_report(tmp_path, score, series)
    html = path.read_text()
    assert "mqbench — demo" in html and "lost 1 (expected 0)" in html and "REJECTREQUEST=3" in html
    for name in ("latency", "throughput", "errors", "memory"):
        png = tmp_path / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plots/{name}.png" in html


def test_totals_are_a_consistent_cut_never_more_consumed_than_sent():
    """A producer and a consumer reporting out of phase: summing their newest reports (the old way) showed
    consumed=61 with sent=0; the cut takes both at one instant."""
    from bench.progress import consistent_cut, merge

    rate = 200 / 1000  # messages per ms

    def producer(t):
        return {
            "w": 0,
            "t": t,
            "phase": "load",
            "sent": int(rate * max(0, t - 1000)),
            "acked": int(rate * max(0, t - 1000)),
            "consumed": 0,
        }

    def consumer(t):
        return {
            "w": 1,
            "t": t,
            "phase": "load",
            "sent": 0,
            "acked": 0,
            "consumed": int(rate * max(0, t - 1050)),
        }  # 50 ms behind

    naive_bad = cut_bad = 0
    for now in range(1000, 4000, 50):
        prod = [producer(t) for t in range(0, now + 1, 250)]  # every 250 ms from 0
        cons = [consumer(t) for t in range(130, now + 1, 250)]  # every 250 ms, out of phase
        naive = merge({0: prod[-1], 1: cons[-1]})
        cut = merge(consistent_cut({0: prod[-16:], 1: cons[-16:]}))
        naive_bad += naive.consumed > naive.sent
        cut_bad += cut.consumed > cut.sent
    assert naive_bad > 0  # the skew is real
    assert cut_bad == 0


def test_a_finished_worker_does_not_hold_the_cut_back():
    from bench.progress import consistent_cut

    hist = {
        0: [{"t": 100, "phase": "done", "sent": 5}],
        1: [{"t": 100, "phase": "load", "consumed": 1}, {"t": 900, "phase": "load", "consumed": 5}],
    }
    cut = consistent_cut(hist)
    assert cut[0]["sent"] == 5 and cut[1]["consumed"] == 5


def test_first_reports_a_millisecond_apart_still_count():
    from bench.progress import consistent_cut, merge

    r = {"phase": "load", "sent": 10, "acked": 9, "failed": 1, "consumed": 8}
    snap = merge(consistent_cut({0: [{**r, "w": 0, "t": 100}], 1: [{**r, "w": 1, "t": 101}]}))
    assert (snap.sent, snap.consumed) == (20, 16)
