"""A local cluster of two broker processes behind one embedded name server, as docs/design.md ("Speed: one
process or many") tells an operator to start it without new code: the second ``mqbroker`` has no name server of
its own (``namesrvListenPort=-1``) and registers with the first's; ``mqadmin updateTopic -c`` creates the topic
on every master. A real client (the C++ wheel) then spreads its sends over both brokers and a push consumer gets
every message from both.
"""

from __future__ import annotations

import json
import subprocess
import sys

from compat_support import (
    REPO_ROOT,
    BrokerFactory,
    Collector,
    cpp_producer,
    cpp_push_consumer,
    describe_missing,
    make_message,
    nul_free_body,
    unique,
)

CONSUME_TIMEOUT_S = 60.0


def _mqadmin(*args: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "mqclient.mqadmin", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_a_real_client_spreads_over_a_two_broker_cluster_and_every_message_arrives(
    broker_factory: BrokerFactory,
) -> None:
    first = broker_factory.start("brokerName=broker-a", name="a")
    namesrv = first.namesrv_addr
    second = broker_factory.start("brokerName=broker-b", "namesrvListenPort=-1", f"namesrvAddr={namesrv}", name="b")
    clusters = _mqadmin("clusterList", "-n", namesrv)
    assert "broker-a" in clusters and "broker-b" in clusters, clusters

    topic = unique("ClusterT")
    _mqadmin("updateTopic", "-n", namesrv, "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4")
    route = _mqadmin("topicRoute", "-n", namesrv, "-t", topic)
    assert first.broker_addr in route and second.broker_addr in route, route

    sent: list[str] = []
    with cpp_producer(namesrv) as producer:
        for i in range(40):  # the client rotates over the route's 8 queues, 4 on each broker
            key = f"k{i}"
            producer.send_sync(make_message(topic, nul_free_body(256, seed=key), key=key))
            sent.append(key)
    per_broker = {"broker-a": 0, "broker-b": 0}
    for row in json.loads(_mqadmin("topicStatus", "--json", "-n", namesrv, "-t", topic)):
        per_broker[row["brokerName"]] += row["maxOffset"]
    assert per_broker["broker-a"] > 0 and per_broker["broker-b"] > 0, per_broker
    assert sum(per_broker.values()) == len(sent), per_broker

    collector = Collector()
    with cpp_push_consumer(namesrv, unique("CG"), {topic: "*"}, collector):
        assert collector.wait_keys(sent, CONSUME_TIMEOUT_S), describe_missing(sent, collector.items())
