"""mqbench against a broker with aclEnable=true: --ak/--sk reach every client of a run (asyncio and grpc drivers)."""

from __future__ import annotations

import asyncio

import pytest
import yaml
from bench_threads import run_plan_threaded

from bench.broker_proc import SMALL_STORE, BrokerProcess
from bench.cli import main as mqbench
from bench.run import RunError, plan_run, prepare_topics
from bench.scenario import parse_scenario
from bench.worker import TaskSpec
from remoting.signature import SessionCredentials

AK, SK = "bench_admin", "bench_secret"


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    home = tmp_path_factory.mktemp("acl-home")
    (home / "conf").mkdir()
    (home / "conf" / "plain_acl.yml").write_text(
        yaml.safe_dump({"accounts": [{"accessKey": AK, "secretKey": SK, "admin": True}]})
    )
    config = {**SMALL_STORE, "aclEnable": "true", "rocketmqHome": str(home)}
    with BrokerProcess(tmp_path_factory.mktemp("acl-broker"), config=config) as b:
        yield b


def test_task_spec_carries_the_credentials():
    scen = parse_scenario({"name": "a"})
    plan = plan_run(scen, run_id="r", namesrv="h:1", tasks=2, progress_addr=None, access_key=AK, secret_key=SK)
    spec = TaskSpec.from_json(plan.specs[0].to_json())
    assert spec.credentials() == SessionCredentials(AK, SK)
    assert plan_run(scen, run_id="r", namesrv="h:1", tasks=1, progress_addr=None).specs[0].credentials() is None


def test_ak_without_sk_is_bad_input(capsys):
    assert mqbench(["run", "smoke", "--ak", AK]) == 2
    assert "--sk" in capsys.readouterr().err


def test_a_run_without_credentials_cannot_create_its_topics(acl_broker):
    with pytest.raises(RunError, match="No accessKey is configured"):
        asyncio.run(prepare_topics(acl_broker.namesrv, ["T_bench_acl_refused"], 4))


@pytest.mark.parametrize("driver", ["asyncio", "grpc"])
def test_a_signed_run_sends_and_consumes_everything(acl_broker, driver):
    scen = parse_scenario(
        {
            "name": "acl",
            "driver": driver,
            "send_mode": "sync",
            "producer_rate": 100,
            "duration_s": 1.0,
            "message_size": 64,
            "drain_timeout_s": 15,
            "client": {"suspend_timeout_ms": 1000},
        }
    )
    plan = plan_run(
        scen,
        run_id=f"acl-{driver}",
        namesrv=acl_broker.namesrv,
        tasks=2,
        progress_addr=None,
        access_key=AK,
        secret_key=SK,
        grpc_endpoint=acl_broker.grpc_endpoint,
    )
    asyncio.run(prepare_topics(acl_broker.namesrv, plan.topics, scen.queues_per_topic, SessionCredentials(AK, SK)))
    merged = run_plan_threaded(plan)
    names = list(merged.cols)
    events = [dict(zip(names, vals)) for vals in zip(*merged.cols.values())]
    sends = [e for e in events if e["event"] == "send"]
    consumed = {e["seq"] for e in events if e["event"] == "consume"}
    assert sends and all(e["status"] == "SEND_OK" for e in sends)
    assert consumed == {e["seq"] for e in sends}
