"""mqclient with credentials against our broker with aclEnable=true (a subprocess): every request signed."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from bench.broker_proc import SMALL_STORE, BrokerProcess
from mqclient import AdminClient, ConsumerConfig, Message, Producer, ProducerConfig, PushConsumer, SendFailedError
from remoting.signature import SessionCredentials

USER = SessionCredentials("mqc_user", "mqc_secret")
ADMIN = SessionCredentials("mqc_admin", "mqc_admin_secret")


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    home = tmp_path_factory.mktemp("acl-home")
    (home / "conf").mkdir()
    (home / "conf" / "plain_acl.yml").write_text(
        yaml.safe_dump(
            {
                "accounts": [
                    {
                        "accessKey": USER.access_key,
                        "secretKey": USER.secret_key,
                        "defaultTopicPerm": "DENY",
                        "defaultGroupPerm": "SUB",
                        "topicPerms": ["mqc-acl=PUB|SUB"],
                    },
                    {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
                ]
            }
        )
    )
    with BrokerProcess(
        tmp_path_factory.mktemp("acl-broker"), config={**SMALL_STORE, "aclEnable": "true", "rocketmqHome": str(home)}
    ) as b:
        yield b


async def test_signed_producer_and_consumer_round_trip(acl_broker):
    ns = acl_broker.namesrv
    async with AdminClient(ns, credentials=ADMIN) as admin:
        await admin.create_topic_everywhere("mqc-acl", 2)
    async with Producer(ns, ProducerConfig(group="pg-acl"), credentials=USER) as p:
        sent = {(await p.send(Message("mqc-acl", f"m{i}".encode()))).msg_id for i in range(10)}
    got: list = []
    config = ConsumerConfig(
        group="cg-acl",
        suspend_timeout_ms=1000,
        pull_delay_on_error_ms=200,
        commit_interval_s=0.5,
        rebalance_interval_s=1.0,
    )
    async with PushConsumer(ns, "mqc-acl", config, lambda m, mq: got.append(m), credentials=USER):
        for _ in range(400):
            if len(got) >= len(sent):
                break
            await asyncio.sleep(0.05)
    assert {m.msg_id for m in got} == sent


async def test_unsigned_and_unauthorised_sends_fail(acl_broker):
    ns = acl_broker.namesrv
    config = ProducerConfig(group="pg-acl-bad", retries=0)
    async with Producer(ns, config) as p:
        with pytest.raises(SendFailedError, match="No accessKey is configured"):
            await p.send(Message("mqc-acl", b"x"))
    async with Producer(ns, config, credentials=USER) as p:
        with pytest.raises(SendFailedError, match="No default permission for topic:mqc-other"):
            await p.send(Message("mqc-other", b"x"))
