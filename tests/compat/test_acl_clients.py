"""ACL 1.0 with real clients: the C++ wheel (`set_session_credentials`) and ali-ons (`accessKey`/`secretKey`)
against a broker started with aclEnable=true and a plain_acl.yml of ours.

For each client: unsigned requests are refused, a wrong secret is refused, the right secret sends and consumes
end to end. The broker logs one warning line per refusal, with the reason upstream would give.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from compat_support import (
    JAVA_MISSING,
    Collector,
    b64,
    cpp_producer,
    cpp_push_consumer,
    describe_missing,
    java_client_missing,
    make_message,
    run_java_source,
    run_ons,
    shutdown_client,
    start_client,
    unique,
)

pytestmark = pytest.mark.compat

rocketmq = pytest.importorskip("rocketmq.client", reason="the rocketmq==0.4.4 wheel is part of the test extra")
from rocketmq.exceptions import ProducerSendSyncFailed  # noqa: E402 (after the importorskip)

AK, SK = "acl_compat_user", "acl_compat_secret"
ADMIN_AK, ADMIN_SK = "acl_compat_admin", "acl_compat_admin_secret"
TOPIC_CPP, TOPIC_ONS, TOPIC_JAVA, TOPIC_DENIED = "T_acl_cpp", "T_acl_ons", "T_acl_java", "T_acl_denied"


def write_acl(home: Path) -> None:
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "conf" / "plain_acl.yml").write_text(
        yaml.safe_dump(
            {
                "globalWhiteRemoteAddresses": ["10.10.103.*"],  # not loopback: every client here must sign
                "accounts": [
                    {
                        "accessKey": AK,
                        "secretKey": SK,
                        "admin": False,
                        "defaultTopicPerm": "DENY",
                        "defaultGroupPerm": "SUB",
                        "topicPerms": [
                            f"{TOPIC_CPP}=PUB|SUB",
                            f"{TOPIC_ONS}=PUB|SUB",
                            f"{TOPIC_JAVA}=PUB|SUB",
                            "COMPAT_WARMUP=PUB",
                            f"{TOPIC_DENIED}=SUB",
                        ],
                    },
                    {"accessKey": ADMIN_AK, "secretKey": ADMIN_SK, "admin": True},
                ],
            },
            sort_keys=False,
        )
    )


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    from compat_support import BrokerFactory

    root = tmp_path_factory.mktemp("acl")
    write_acl(root / "home")
    factory = BrokerFactory(root)
    try:
        yield factory.start("aclEnable=true", f"rocketmqHome={root / 'home'}", name="acl")
    finally:
        factory.close()


def raw_cpp_producer(namesrv: str, credentials: tuple[str, str] | None):
    """A started wheel producer that is NOT warmed up (its first send is the one under test)."""
    from rocketmq.client import Producer
    from rocketmq.ffi import dll

    producer = Producer(unique("PG_acl"), timeout=3000)
    dll.SetProducerInstanceName(producer._handle, unique("p").encode())
    producer.set_namesrv_addr(namesrv)
    if credentials is not None:
        producer.set_session_credentials(credentials[0], credentials[1], "")
    start_client(producer)
    return producer


def wait_for_log(broker, text: str, since: int, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        log = broker.log_text(since)
        if text in log:
            return log
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in the broker log:\n{broker.log_text(since)[-3000:]}")


@pytest.mark.parametrize(
    "credentials, reason",
    [
        (None, '"reason": "No acl config for "'),  # the wheel always sends AccessKey, empty without credentials
        ((AK, "not_the_secret"), f"Check signature failed for accessKey={AK}"),
        (("nobody_here", SK), "No acl config for nobody_here"),
    ],
)
def test_cpp_producer_without_the_right_secret_is_refused(acl_broker, credentials, reason):
    mark = acl_broker.log_size()
    producer = raw_cpp_producer(acl_broker.namesrv_addr, credentials)
    try:
        with pytest.raises(ProducerSendSyncFailed):
            producer.send_sync(make_message(TOPIC_CPP, b"must not be stored"))
    finally:
        shutdown_client(producer)
    log = wait_for_log(acl_broker, "request refused by acl", mark)
    assert reason in log
    assert "Traceback" not in log


def test_cpp_producer_cannot_send_to_a_topic_it_may_only_read(acl_broker):
    mark = acl_broker.log_size()
    with cpp_producer(acl_broker.namesrv_addr, credentials=(AK, SK)) as producer:
        with pytest.raises(ProducerSendSyncFailed):
            producer.send_sync(make_message(TOPIC_DENIED, b"no PUB here"))
    log = wait_for_log(acl_broker, f"No default permission for topic:{TOPIC_DENIED}", mark)
    assert "Traceback" not in log


def test_cpp_right_secret_sends_and_consumes_end_to_end(acl_broker):
    group = unique("CG_acl_cpp")
    sent = {}
    with cpp_producer(acl_broker.namesrv_addr, credentials=(AK, SK)) as producer:
        for i in range(20):
            key = f"acl-cpp-{i}"
            body = f"signed body {i}".encode()
            producer.send_sync(make_message(TOPIC_CPP, body, key=key))
            sent[key] = body
    collector = Collector()
    with cpp_push_consumer(acl_broker.namesrv_addr, group, {TOPIC_CPP: "*"}, collector, credentials=(AK, SK)):
        assert collector.wait_keys(sent, timeout_s=30), describe_missing(sent, collector.items())
    got = {item.key: item.body for item in collector.items()}
    # the refused sends of the tests above went to the same topic: none of them was stored
    assert not [i for i in collector.items() if i.body == b"must not be stored"]
    assert all(got[k] == sent[k] for k in sent)


def test_cpp_consumer_with_a_wrong_secret_gets_nothing(acl_broker):
    topic_msgs = {}
    with cpp_producer(acl_broker.namesrv_addr, credentials=(AK, SK)) as producer:
        producer.send_sync(make_message(TOPIC_CPP, b"for the right consumer only", key="acl-cpp-wrong"))
        topic_msgs["acl-cpp-wrong"] = True
    mark = acl_broker.log_size()
    collector = Collector()
    with cpp_push_consumer(
        acl_broker.namesrv_addr, unique("CG_acl_bad"), {TOPIC_CPP: "*"}, collector, credentials=(AK, "not_the_secret")
    ):
        wait_for_log(acl_broker, f"Check signature failed for accessKey={AK}", mark, timeout_s=15)
        time.sleep(2)
    assert collector.items() == []


def ons_args(broker, topic: str, group: str, **extra) -> dict:
    messages = [{"body_b64": b64(f"ons signed {i}".encode()), "keys": [f"acl-ons-{i}"]} for i in range(5)]
    return {
        "nameSrv": broker.namesrv_addr,
        "topic": topic,
        "group": group,
        "producerGroup": unique("PG_acl_ons"),
        "messages": messages,
        **extra,
    }


@pytest.mark.usefixtures("node_ready")
def test_ons_right_secret_sends_and_consumes_end_to_end(acl_broker):
    run = run_ons(ons_args(acl_broker, TOPIC_ONS, unique("CG_acl_ons"), mode="both", accessKey=AK, secretKey=SK))
    assert run.rc == 0 and not run.of("send_error") and not run.of("fatal"), run.describe()
    assert len(run.of("sent")) == 5, run.describe()
    assert sorted(e["keys"] for e in run.of("received")) == sorted(f"acl-ons-{i}" for i in range(5)), run.describe()


@pytest.mark.usefixtures("node_ready")
@pytest.mark.parametrize(
    "secret, reason",
    [
        ("not_the_secret", f"Check signature failed for accessKey={AK}"),
        (None, "No acl config for compat-dummy-ak"),  # the driver's dummy credentials
    ],
)
def test_ons_without_the_right_secret_is_refused(acl_broker, secret, reason):
    mark = acl_broker.log_size()
    extra = {"accessKey": AK, "secretKey": secret} if secret else {}
    run = run_ons(ons_args(acl_broker, TOPIC_ONS, unique("CG_acl_ons_bad"), mode="produce", **extra), timeout_s=60)
    assert not run.of("sent"), run.describe()
    assert run.of("send_error") or run.of("fatal") or run.rc != 0, run.describe()
    log = wait_for_log(acl_broker, reason, mark)
    assert "Traceback" not in log


# ---------------------------------------------------------------------------------------------- Java client


def run_java(broker, topic: str, group: str, ak: str, sk: str, count: int) -> list[dict]:
    """AclRoundTrip.java through rmqjava (the 4.9.7 client jars; AclClientRPCHook when `ak` is not empty)."""
    return run_java_source("AclRoundTrip.java", [broker.namesrv_addr, topic, group, ak, sk, str(count)], 120)


java = pytest.mark.skipif(java_client_missing(), reason=JAVA_MISSING)


@java
@pytest.mark.slow
def test_java_right_secret_sends_and_consumes_end_to_end(acl_broker):
    events = run_java(acl_broker, TOPIC_JAVA, unique("CG_acl_java"), AK, SK, 5)
    assert [e["key"] for e in events if e["event"] == "sent"] == [f"k{i}" for i in range(5)], events
    assert sorted({e["key"] for e in events if e["event"] == "received"}) == [f"k{i}" for i in range(5)], events
    assert events[-1]["complete"] is True


@java
@pytest.mark.slow
@pytest.mark.parametrize(
    "ak, sk, reason",
    [
        ("", "", "No accessKey is configured"),
        (AK, "not_the_secret", f"Check signature failed for accessKey={AK}"),
    ],
)
def test_java_without_the_right_secret_is_refused(acl_broker, ak, sk, reason):
    mark = acl_broker.log_size()
    events = run_java(acl_broker, TOPIC_JAVA, unique("CG_acl_java_bad"), ak, sk, 1)
    assert not [e for e in events if e["event"] == "sent"] and [e for e in events if e["event"] == "send_error"]
    assert "Traceback" not in wait_for_log(acl_broker, reason, mark)
