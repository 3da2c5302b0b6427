"""``mqbench compare``: deltas, regressions beyond the threshold, exit codes."""

from __future__ import annotations

import copy
import json

from bench.cli import main
from bench.compare import compare, format_table


def score(**over) -> dict:
    s = {
        "counts": {
            "lost": 0,
            "duplicated": 0,
            "out_of_order": 0,
            "failed": 0,
            "delivered_unacked": 0,
            "duplicates_stored": 0,
            "retries": 3,
        },
        "publish": {
            "rate_msg_s": 1000.0,
            "rate_mib_s": 1.0,
            "latency_ms": {"p50": 2.0, "p95": 5.0, "p99": 10.0, "p99_9": 20.0, "max": 50.0},
        },
        "consume": {"rate_msg_s": 1000.0, "rate_mib_s": 1.0},
        "end_to_end": {"latency_ms": {"p50": 3.0, "p95": 6.0, "p99": 12.0, "p99_9": 25.0, "max": 60.0}},
        "errors": {"busy_total": 0},
        "backlog": {"max": 10, "drain_time_s": 0.5},
        "broker": {},
        "client": {},
    }
    for path, value in over.items():
        cur = s
        keys = path.split("__")
        for k in keys[:-1]:
            cur = cur[k]
        cur[keys[-1]] = value
    return s


def regressions(a, b, **kw):
    return [d.metric.path for d in compare(a, b, **kw) if d.regression]


def test_identical_scores_have_no_regression():
    assert regressions(score(), score()) == []


def test_latency_and_rate_beyond_threshold():
    b = score(
        publish__latency_ms={"p50": 2.0, "p95": 5.0, "p99": 12.5, "p99_9": 20.0, "max": 500.0},
        publish__rate_msg_s=850.0,
    )
    assert regressions(score(), b) == ["publish.rate_msg_s", "publish.latency_ms.p99"]
    # max latency is informational only; within a looser threshold nothing regresses
    assert regressions(score(), b, threshold=0.3) == []
    assert regressions(score(), b, threshold=0.3, overrides={"publish.latency_ms.p99": 0.2}) == [
        "publish.latency_ms.p99"
    ]


def test_tiny_latency_changes_are_noise():
    a = score(end_to_end__latency_ms={"p50": 0.2, "p95": 0.4, "p99": 0.6, "p99_9": 1.0, "max": 2.0})
    b = score(end_to_end__latency_ms={"p50": 0.3, "p95": 0.6, "p99": 0.9, "p99_9": 3.0, "max": 2.0})
    assert regressions(a, b) == ["end_to_end.latency_ms.p99_9"]
    assert regressions(a, b, latency_floor_ms=0.01) == [
        f"end_to_end.latency_ms.{p}" for p in ("p50", "p95", "p99", "p99_9")
    ]


def test_zero_to_nonzero_counts_regress_and_improvements_do_not():
    assert regressions(score(), score(counts__lost=1)) == ["counts.lost"]
    deltas = compare(score(counts__lost=5), score())
    lost = next(d for d in deltas if d.metric.path == "counts.lost")
    assert lost.improvement and not lost.regression
    table = format_table(compare(score(), score(counts__lost=1)))
    assert "counts.lost" in table and "REGRESSION" in table


def test_cli_exit_codes(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "score.json").write_text(json.dumps(score()))
    (b / "score.json").write_text(json.dumps(score(counts__duplicated=4)))
    assert main(["compare", str(a), str(a)]) == 0
    assert main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "1 regression(s)" in out and "counts.duplicated" in out
    assert main(["compare", str(a), str(b / "score.json"), "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert any(r["metric"] == "counts.duplicated" and r["regression"] for r in rows)
    assert main(["compare", str(a), str(tmp_path / "nope")]) == 2
    assert "no score at" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--metric-threshold", "oops"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"x": 1}))
    assert main(["compare", str(a), str(bad)]) == 2


def test_missing_metrics_are_skipped():
    a = score()
    b = copy.deepcopy(a)
    del b["publish"]["rate_mib_s"]
    d = next(d for d in compare(a, b) if d.metric.path == "publish.rate_mib_s")
    assert d.b is None and not d.regression
