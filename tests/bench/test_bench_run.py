"""``mqbench run`` end to end in local[2]: a broker subprocess, Spark load tasks, scoring, report."""

from __future__ import annotations

import dataclasses
import json

import pyarrow.dataset as ds
import pytest

from bench.cli import main
from bench.run import RunError, RunOptions, run_scenario
from bench.scenario import DebugSpec, load_scenario
from broker.testing.ports import free_port


@pytest.mark.slow
def test_smoke_run_accounting_holds(spark, tmp_path):
    scen = load_scenario("smoke")
    # planted losses: the consumer "forgets" these sequence numbers, which the score must call lost when
    # their send was acknowledged (an early send can fail on a busy machine, and is then not "lost"); every 20th
    # after the first ones too, as the first sends can start late enough for the append stall to refuse them all
    planted = tuple(range(5, 25)) + tuple(range(40, 1000, 20))
    scen = dataclasses.replace(scen, debug=DebugSpec(drop_consumed_seqs=planted))
    out = tmp_path / "run"
    result = run_scenario(scen, RunOptions(out_dir=out, spark=spark, progress=False))
    s = result.score
    c = s["counts"]
    # the outcome table read back without Spark: three more Spark queries would cost this test seconds
    rows = ds.dataset(str(out / "outcomes"), format="parquet").to_table().to_pylist()
    acked = [r for r in rows if r["event"] == "send" and r["status"] == "SEND_OK"]
    acked_planted = {r["seq"] for r in acked if r["seq"] in planted}
    assert c["sent"] > 100, c
    assert c["accounted"] and c["sent"] == c["acked"] + c["failed"] + c["oneway"], c
    assert acked_planted, ("no planted sequence number was acknowledged", c)
    # every acked message was consumed, except the planted ones
    assert c["lost"] == len(acked_planted), (c, sorted(acked_planted))
    assert {x["seq"] for x in s["lost_sample"]} <= acked_planted
    assert c["consumed_unique"] == c["acked"] - len(acked_planted), c
    assert s["backlog"]["drain_complete"]
    # the append stall shows up as busy answers of the page-cache kinds (or queue timeouts behind it)
    assert s["errors"]["busy_total"] > 0
    assert set(s["errors"]["busy"]) <= {"REJECTREQUEST", "PCBUSY_CLEAN_QUEUE", "TIMEOUT_CLEAN_QUEUE", "PC_SYNCHRONIZED"}
    assert [f["kind"] for f in s["faults"]] == ["stall_append"] and s["faults"][0]["answer"].startswith("OK")
    assert s["publish"]["latency_ms"]["p50"] is not None and s["end_to_end"]["latency_ms"]["p99"] is not None
    assert s["broker"]["started_by_mqbench"] and s["broker"]["boot_time_s"] > 0
    assert s["broker"]["rss_at_boot_bytes"] > 0
    assert s["client"]["peak_rss_bytes"] > 0
    assert s["run"]["tasks"] == 2
    for name in (
        "score.json",
        "series.json",
        "report.html",
        "run.json",
        "plots/latency.png",
        "plots/throughput.png",
        "plots/errors.png",
    ):
        assert (out / name).exists(), name
    assert json.loads((out / "score.json").read_text())["counts"]["lost"] == len(acked_planted)
    # the outcome table has what the issue asks for, per message
    consumed = next(r for r in rows if r["event"] == "consume")
    assert consumed["consumer"] and consumed["msg_id"] and consumed["consume_ms"] and consumed["queue_id"] is not None
    assert acked[0]["ack_ms"] >= acked[0]["send_ms"] and acked[0]["msg_id"] and acked[0]["uniq_key"]


def test_unreachable_name_server_is_a_clear_error(tmp_path, capsys):
    addr = f"127.0.0.1:{free_port()}"
    with pytest.raises(RunError, match=f"cannot use name server {addr}.*refused"):
        run_scenario(load_scenario("smoke"), RunOptions(out_dir=tmp_path / "x", namesrv=addr, progress=False))
    assert main(["run", "smoke", "--namesrv", addr, "--out", str(tmp_path / "y"), "--quiet"]) == 1
    assert f"cannot use name server {addr}" in capsys.readouterr().err
