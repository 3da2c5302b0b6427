"""``mqbench run``: plan a scenario into Spark tasks, run the load job, then the scoring job and the report.

Layout of a run directory::

    run.json        what ran: scenario, run id, name server, master, tasks, broker facts
    outcomes/       the outcome table (Parquet, written by the load job)
    score.json      the score (``bench.score``); series.json the per-second series
    report.html     the report, with plots/*.png — readable without Spark
    spark.log       Spark's own logs; broker.log when mqbench started the broker
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from bench.scenario import Scenario
from bench.worker import ConsumerSpec, ProducerSpec, TaskSpec
from remoting.signature import SessionCredentials

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class RunError(RuntimeError):
    """A run that could not start or finish; the message says why in user terms."""


@dataclass
class RunOptions:
    out_dir: Path
    namesrv: str | None = None
    master: str = "local[*]"
    driver: str | None = None  # overrides the scenario's driver
    tasks: int | None = None  # overrides the scenario's task count
    progress: bool = True
    progress_out: TextIO | None = None
    run_id: str | None = None
    spark: SparkSession | None = None  # an existing session (tests); else one is built for ``master``
    spark_conf: dict[str, str] = field(default_factory=dict)
    keep_store: bool = False  # keep the store of a broker mqbench started (it preallocates 1 GiB+)
    access_key: str | None = None  # ACL credentials for a broker with aclEnable=true (--ak/--sk)
    secret_key: str | None = None
    grpc_endpoint: str | None = None  # the 5.x endpoint of an existing broker (--protocol grpc with --namesrv)


@dataclass
class Plan:
    run_id: str
    topics: list[str]
    groups: dict[str, list[str]]
    specs: list[TaskSpec]


@dataclass
class RunResult:
    out_dir: Path
    score: dict[str, Any]
    meta: dict[str, Any]
    progress_lines: list[str]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def topic_names(scen: Scenario, run_id: str) -> list[str]:
    """Fresh topics per run: no earlier run's messages can be mistaken for this one's."""
    return [f"{scen.topic_prefix}-{run_id}-t{i}" for i in range(scen.topics)]


def plan_run(
    scen: Scenario,
    *,
    run_id: str,
    namesrv: str,
    tasks: int,
    progress_addr: str | None,
    access_key: str | None = None,
    secret_key: str | None = None,
    grpc_endpoint: str = "",
) -> Plan:
    """Name topics and groups, and deal producers and consumers out to ``tasks`` Spark tasks so each
    task runs a mix (consumers start where producers stopped, so 1 + 1 clients use 2 tasks)."""
    topics = topic_names(scen, run_id)
    producers = [
        ProducerSpec(id=f"t{ti}-p{p}", topic=t) for ti, t in enumerate(topics) for p in range(scen.producers_per_topic)
    ]
    groups: dict[str, list[str]] = {}
    consumers = []
    for ti, t in enumerate(topics):
        for s in range(scen.subscriptions_per_topic):
            g = f"{scen.topic_prefix}-{run_id}-t{ti}-s{s}"
            groups.setdefault(t, []).append(g)
            consumers += [
                ConsumerSpec(id=f"t{ti}-s{s}-c{c}", topic=t, group=g) for c in range(scen.consumers_per_subscription)
            ]
    tasks = max(1, min(tasks, len(producers) + len(consumers)))
    specs = [
        TaskSpec(
            run_id=run_id,
            worker=i,
            namesrv=namesrv,
            scenario=scen.to_dict(),
            topics=topics,
            progress_addr=progress_addr,
            run_faults=(i == 0),
            access_key=access_key,
            secret_key=secret_key,
            grpc_endpoint=grpc_endpoint,
        )
        for i in range(tasks)
    ]
    for i, p in enumerate(producers):
        specs[i % tasks].producers.append(p)
    for i, c in enumerate(consumers):
        specs[(len(producers) + i) % tasks].consumers.append(c)
    return Plan(run_id=run_id, topics=topics, groups=groups, specs=specs)


async def prepare_topics(namesrv: str, topics: list[str], queues: int, credentials: Any = None) -> dict[str, Any]:
    """Check the name server answers, then create the run's topics on every master (with ACL on, creating
    topics needs an admin account's ``credentials``)."""
    from mqclient import AdminClient, MQClientError

    async with AdminClient(namesrv, timeout_s=3.0, credentials=credentials) as admin:
        try:
            await admin.ping_namesrv()
        except MQClientError as exc:
            raise RunError(f"cannot use name server {namesrv}: {exc}") from None
        try:
            brokers = await admin.brokers()
            for t in topics:
                await admin.create_topic_everywhere(t, queues)
        except MQClientError as exc:
            raise RunError(f"cannot create the run's topics through {namesrv}: {exc}") from None
        return {"brokers": [{"name": b.broker_name, "cluster": b.cluster, "master": b.master} for b in brokers]}


def execute_load(spark: SparkSession, specs: list[TaskSpec], out_path: Path, *, driver: str | None) -> None:
    """The load job: one barrier task per spec; each yields its outcome rows as Arrow batches."""
    from bench.outcomes import spark_ddl

    slots = spark.sparkContext.defaultParallelism
    if len(specs) > slots:
        raise RunError(
            f"the run needs {len(specs)} simultaneous Spark tasks but the cluster offers {slots} "
            f"slots; lower 'tasks' in the scenario or add executors"
        )
    rows = [(s.worker, s.to_json()) for s in specs]
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), "worker int, spec string")

    def load(batches):  # type: ignore[no-untyped-def]
        from bench.worker import SparkBarrier, TaskSpec, quiet_logs, run_task

        quiet_logs()
        for b in batches:
            for text in b.column("spec").to_pylist():
                buf = run_task(TaskSpec.from_json(text), SparkBarrier(), driver=driver)
                yield from buf.batches()

    df.mapInArrow(load, spark_ddl(), barrier=True).write.mode("overwrite").parquet(str(out_path))


def wait_for_slots(spark: SparkSession, wanted: int | None, timeout_s: float = 90.0) -> int:
    """On a cluster, wait until executors have registered (and offer ``wanted`` slots, if given):
    a barrier stage submitted before that fails its slot check. Returns the slots available."""
    sc = spark.sparkContext
    if sc.master.startswith("local"):
        return sc.defaultParallelism
    deadline = time.monotonic() + timeout_s
    while True:
        executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
        slots = sc.defaultParallelism
        if executors > 0 and (wanted is None or slots >= wanted):
            return slots
        if time.monotonic() > deadline:
            raise RunError(
                f"the cluster at {sc.master} offers {slots} task slot(s) from {max(executors, 0)} "
                f"executor(s) after {timeout_s:.0f}s; the run needs {wanted or 1}"
            )
        time.sleep(0.5)


def spark_error_message(exc: BaseException) -> str:
    """The Python error inside a failed Spark task, without pages of JVM stack."""
    text = str(exc)
    for marker in ("PythonException:", "An exception was thrown from the Python worker"):
        i = text.find(marker)
        if i >= 0:
            tail = text[i:].splitlines()
            tb = [ln for ln in tail if ln and not ln.startswith("\tat ")]
            # the last non-frame line of the Python traceback is the error itself
            py = [ln for ln in tb if not ln.startswith("  ")]
            return py[-1] if py else tb[0]
    return text.splitlines()[0] if text else type(exc).__name__


def run_scenario(scen: Scenario, opts: RunOptions) -> RunResult:
    from bench.broker_proc import BrokerProcess, BrokerStartError
    from bench.progress import ProgressCollector
    from bench.report import write_report
    from bench.score import score_outcomes, write_score
    from bench.session import SparkLaunchError, get_session

    out = opts.out_dir
    out.mkdir(parents=True, exist_ok=True)
    run_id = opts.run_id or new_run_id()
    driver = opts.driver or scen.driver
    broker: BrokerProcess | None = None
    own_spark = opts.spark is None
    spark = opts.spark
    collector: ProgressCollector | None = None
    meta: dict[str, Any] = {
        "run_id": run_id,
        "scenario": scen.to_dict(),
        "driver": driver,
        "master": opts.master,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        namesrv = opts.namesrv
        grpc_endpoint = opts.grpc_endpoint or ""
        if namesrv is None:
            try:
                broker = BrokerProcess(
                    out / "broker-store",
                    config=dict(scen.broker.config),
                    fault_injection=scen.broker.fault_injection,
                    log_path=out / "broker.log",
                ).start(scen.broker.boot_timeout_s)
            except BrokerStartError as exc:
                raise RunError(str(exc)) from None
            namesrv = broker.namesrv
            grpc_endpoint = broker.grpc_endpoint
        meta["namesrv"] = namesrv
        credentials = SessionCredentials(opts.access_key, opts.secret_key or "") if opts.access_key else None
        meta["cluster"] = asyncio.run(
            prepare_topics(namesrv, topic_names(scen, run_id), scen.queues_per_topic, credentials)
        )
        if spark is None:
            try:
                spark = get_session(opts.master, log_dir=out, conf=opts.spark_conf)
            except SparkLaunchError as exc:
                raise RunError(str(exc)) from None
        meta["master"] = spark.sparkContext.master
        host = spark.sparkContext.getConf().get("spark.driver.host", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
        collector = ProgressCollector(host, out=opts.progress_out, enabled=opts.progress).start()
        slots = wait_for_slots(spark, opts.tasks or scen.tasks)
        tasks = opts.tasks or scen.tasks or slots
        plan = plan_run(
            scen,
            run_id=run_id,
            namesrv=namesrv,
            tasks=tasks,
            progress_addr=collector.addr,
            access_key=opts.access_key,
            secret_key=opts.secret_key,
            grpc_endpoint=grpc_endpoint,
        )
        meta.update(tasks=len(plan.specs), groups=plan.groups, topics=plan.topics)
        (out / "run.json").write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
        started = time.time_ns() // 1_000_000
        try:
            execute_load(spark, plan.specs, out / "outcomes", driver=driver)
        except RunError:
            raise
        except Exception as exc:
            if (
                type(exc).__name__ in ("Py4JJavaError", "PythonException", "SparkException")
                or "pyspark" in type(exc).__module__
            ):
                raise RunError(
                    f"the load job failed: {spark_error_message(exc)} (details in {out / 'spark.log'})"
                ) from None
            raise
        meta["load_job_s"] = round((time.time_ns() // 1_000_000 - started) / 1000, 3)
        final = collector.stop()
        progress_lines = collector.lines
        collector = None
        meta["progress_final"] = {"sent": final.sent, "acked": final.acked, "consumed": final.consumed}
        if broker is not None:
            meta["broker"] = broker.info()
        elif scen.faults or scen.message_faults:
            meta["broker"] = {
                "started_by_mqbench": False,
                "note": "faults need our broker started with faultInjectionEnable=true",
            }
        (out / "run.json").write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
        result = score_outcomes(spark, out / "outcomes", meta)
        write_score(result, out)
        write_report(out, result.score, result.series)
        return RunResult(out_dir=out, score=result.score, meta=meta, progress_lines=progress_lines)
    finally:
        if collector is not None:
            collector.stop()
        if broker is not None:
            broker.stop()
            if not opts.keep_store:
                shutil.rmtree(broker.store_dir, ignore_errors=True)
        if own_spark and spark is not None:
            spark.stop()
