"""The send-latency program (bench/java/SendLatency.java via bench/send_latency.py): its histogram reports known
percentiles, a short run against our broker prints sane figures, and a machine without Java skips cleanly.

The Java tests skip unless javac and the Apache RocketMQ 4.9.7 reference jars are present."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from bench import send_latency, vs_java
from bench.broker_proc import SMALL_STORE, BrokerProcess
from bench.send_latency import LatencyFigures, LatencyToolError, SendLatencyTool


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> SendLatencyTool:
    bin_dir = vs_java.find_reference_bin(None)
    if bin_dir is None or shutil.which("javac") is None:
        pytest.skip("needs javac and the Apache RocketMQ 4.9.7 reference tools")
    try:  # a fresh cache: the compile itself is under test too
        return SendLatencyTool.prepare(bin_dir / "rmqjava", tmp_path_factory.mktemp("send-latency-cache"))
    except LatencyToolError as exc:
        pytest.skip(str(exc))


def _histogram(tool: SendLatencyTool, micros: list[int]) -> dict:
    import orjson

    done = subprocess.run(
        ["java", "-cp", str(tool.classes), send_latency.MAIN_CLASS, "--histogram"],
        input="\n".join(map(str, micros)).encode(),
        capture_output=True,
        timeout=60,
        check=True,
    )
    return orjson.loads(done.stdout.splitlines()[-1])


def test_histogram_percentiles_of_a_known_distribution(tool: SendLatencyTool) -> None:
    """1..100,000 us: each percentile within the histogram's 0.2% bucket error, never below the true value;
    below 1 ms buckets are exact."""
    out = _histogram(tool, list(range(100_000, 0, -1)))  # descending: order of arrival must not matter
    lat = out["latency_ms"]
    assert out["count"] == 100_000
    for key, true_ms in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9)):
        assert true_ms <= lat[key] <= true_ms * 1.002, (key, lat[key])
    assert lat["max"] == 100.0 and lat["mean"] == 50.0
    small = _histogram(tool, list(range(1, 1001)))["latency_ms"]
    assert (small["p50"], small["p99"], small["max"]) == (0.5, 0.99, 1.0)
    spike = _histogram(tool, [200] * 990 + [5_000_000] * 10)["latency_ms"]  # 1% of sends stalled 5 s
    assert spike["p50"] == 0.2 and spike["p99"] == 0.2 and 5000.0 <= spike["p999"] <= 5010.0


def test_a_short_run_against_our_broker(tool: SendLatencyTool, tmp_path: Path) -> None:
    broker = BrokerProcess(store_dir=tmp_path / "store", fault_injection=False, config=dict(SMALL_STORE)).start()
    try:
        figures = tool.run(broker.namesrv, "SendLatencyT", threads=4, size=1024, seconds=3.0, warmup=1.0)
    finally:
        broker.stop()
    assert (figures.threads, figures.size) == (4, 1024)
    assert figures.sent > 0 and figures.failed == 0 and figures.tps > 0
    assert 3.0 <= figures.seconds < 30.0
    assert 0 < figures.p50_ms <= figures.p90_ms <= figures.p99_ms <= figures.p999_ms <= figures.max_ms
    assert figures.p50_ms <= figures.mean_ms * 10


def test_an_open_load_sends_at_its_rate(tool: SendLatencyTool, tmp_path: Path) -> None:
    """-r: 300 sends/s over 4 threads for 3 s is ~900 sends whatever the broker could take (a closed load of 4
    threads sends thousands a second to an idle broker); latencies still ordered."""
    broker = BrokerProcess(store_dir=tmp_path / "store", fault_injection=False, config=dict(SMALL_STORE)).start()
    try:
        figures = tool.run(broker.namesrv, "SendLatencyOpen", threads=4, size=256, seconds=3.0, warmup=1.0, rate=300)
    finally:
        broker.stop()
    assert figures.rate == 300.0 and figures.failed == 0
    assert 800 <= figures.sent <= 920, figures
    assert 0 < figures.p50_ms <= figures.p99_ms <= figures.max_ms


def test_without_javac_the_phase_is_a_note_not_a_failure(tmp_path: Path, monkeypatch) -> None:
    lib, bin_dir = tmp_path / "lib", tmp_path / "bin"
    lib.mkdir()
    bin_dir.mkdir()
    (lib / "rocketmq-client-4.9.7.jar").touch()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    notes: list[str] = []
    assert send_latency.measure(bin_dir / "rmqjava", "127.0.0.1:1", "T", 5.0, notes) is None
    assert notes == ["latency phase: javac not found on PATH (needs a JDK 17)"]
    assert send_latency.measure(bin_dir / "rmqjava", "127.0.0.1:1", "T", 0.0, notes) is None  # phase off


def test_missing_reference_tools_skip_cleanly(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert send_latency.main(["--rmq-bin", str(tmp_path / "nowhere")]) == 0
    assert capsys.readouterr().out.startswith("skipped: Apache RocketMQ 4.9.7 tools not found")


def test_report_rows_sit_under_the_vs_java_table() -> None:
    line = (
        b'{"threads":16,"size":1024,"seconds":30.0,"warmup_sent":9,"warmup_failed":0,"sent":300000,"failed":0,'
        b'"not_ok":0,"tps":10000.0,"latency_ms":{"p50":1.0,"p90":2.0,"p99":4.0,"p999":8.0,"max":50.0,"mean":1.2},'
        b'"last_error":null}'
    )
    java = LatencyFigures.from_json(line)
    ours = LatencyFigures.from_json(line.replace(b'"p99":4.0', b'"p99":6.0'))
    rows = send_latency.report_lines(java, ours)
    p99 = next(r for r in rows if r.startswith("send p99 ms"))
    assert p99.split()[-3:] == ["4.000", "6.000", "1.50x"]
    assert send_latency.report_lines(None, None) == []
    assert send_latency.report_lines(None, ours)[0].split()[-3:] == ["-", "1.000", "-"]


def test_interleaved_rounds_report_the_median_of_each_figure() -> None:
    base = LatencyFigures.from_json(
        b'{"threads":16,"size":1024,"seconds":20.0,"sent":100,"failed":0,"not_ok":0,"tps":5.0,'
        b'"latency_ms":{"p50":1.0,"p90":2.0,"p99":3.0,"p999":4.0,"max":9.0,"mean":1.0}}'
    )
    rounds = [
        base,
        dataclasses.replace(base, p99_ms=30.0, max_ms=90.0, failed=1),  # one noisy round does not set the figure
        dataclasses.replace(base, p99_ms=5.0, tps=7.0),
    ]
    median = send_latency._median_figures(rounds)
    assert (median.p99_ms, median.max_ms, median.tps, median.p50_ms) == (5.0, 9.0, 5.0, 1.0)
    assert (median.sent, median.failed) == (300, 1)
