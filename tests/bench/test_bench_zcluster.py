"""Scale-out: the same ``mqbench run`` job on a Spark cluster.

In the suite: a ``local-cluster[1,2,1024]`` master — a real standalone master and worker inside the
driver JVM, the load tasks in a separate executor JVM and its Python workers, exactly the code
path of ``--master spark://``. Opt-in (MQBENCH_STANDALONE_TEST=1, ~2 minutes): a started standalone
master and worker on loopback, driven through the ``mqbench`` command line.
(The module name sorts last so the shared local[2] session is not rebuilt in between.)
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run import RunOptions, run_scenario
from bench.scenario import DebugSpec, load_scenario
from bench.session import get_session

#: planted losses: consumed but "forgotten"; only the acknowledged ones count as lost. Early sequence numbers and
#: every 20th after them, so that some are acknowledged wherever the smoke scenario's append stall falls (on a
#: loaded machine the first sends can start late enough for the stall to refuse all of 5-24)
PLANTED = tuple(range(5, 25)) + tuple(range(40, 1000, 20))


def _acked_planted(out: Path) -> set[int]:
    import pyarrow.dataset as ds

    table = ds.dataset(str(out / "outcomes"), format="parquet").to_table(columns=["event", "status", "seq"])
    return {
        seq
        for event, status, seq in zip(*(table.column(n).to_pylist() for n in ("event", "status", "seq")))
        if event == "send" and status == "SEND_OK" and seq in PLANTED
    }


def _check(score: dict, out: Path) -> None:
    c = score["counts"]
    acked = _acked_planted(out)
    assert c["sent"] > 100 and c["accounted"], c
    assert acked, ("no planted sequence number was acknowledged", c)
    assert c["lost"] == len(acked), (c, sorted(acked))
    assert {x["seq"] for x in score["lost_sample"]} <= acked
    assert c["consumed_unique"] == c["acked"] - len(acked), c
    assert score["errors"]["busy_total"] > 0
    assert score["run"]["tasks"] == 2


@pytest.mark.slow
def test_same_job_on_a_local_cluster(spark, spark_log_dir, tmp_path):
    spark.stop()
    cluster = get_session("local-cluster[1,2,1024]", app_name="mqbench-cluster-test", log_dir=spark_log_dir)
    try:
        assert cluster.sparkContext.master.startswith("local-cluster")
        scen = dataclasses.replace(load_scenario("smoke"), debug=DebugSpec(drop_consumed_seqs=PLANTED))
        result = run_scenario(scen, RunOptions(out_dir=tmp_path / "run", spark=cluster, progress=False))
        _check(result.score, tmp_path / "run")
        assert result.meta["master"].startswith("local-cluster")
        # the load ran in the executor's Python workers, and they reported progress to the driver
        assert result.meta["progress_final"]["sent"] == result.score["counts"]["sent"]
    finally:
        cluster.stop()


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("MQBENCH_STANDALONE_TEST") != "1",
    reason="set MQBENCH_STANDALONE_TEST=1 to start a standalone master and worker (~2 min)",
)
def test_same_job_on_a_standalone_master_and_worker(tmp_path):
    from bench.standalone import LocalStandaloneCluster

    scen = tmp_path / "smoke-drop.yaml"
    text = Path(load_scenario("smoke").source).read_text()
    scen.write_text(text + f"debug:\n  drop_consumed_seqs: {list(PLANTED)}\n")
    with LocalStandaloneCluster(tmp_path / "cluster") as cluster:
        out = tmp_path / "run"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.cli",
                "run",
                str(scen),
                "--master",
                cluster.master_url,
                "--out",
                str(out),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    score = json.loads((out / "score.json").read_text())
    _check(score, out)
    assert score["run"]["master"] == cluster.master_url
