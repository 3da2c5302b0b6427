"""ACL 1.0 with the official Python 5.x client: its Credentials against a broker started with aclEnable=true.

The same plain_acl.yml accounts as the 4.x clients use; the client signs each call (MQv2-HMAC-SHA1 over
x-mq-date-time) and the broker answers a refusal with UNAUTHORIZED in the response's Status.
"""

from __future__ import annotations

import pytest
import yaml
from compat_support import BrokerFactory, create_topic, unique
from grpc_support import ClientVenvError, ensure_client_venv, run_client
from test_grpc_client import start_grpc_broker

pytestmark = [pytest.mark.compat]

AK, SK = "grpc5_user", "grpc5_user_secret"
ADMIN_AK, ADMIN_SK = "grpc5_admin", "grpc5_admin_secret"
TOPIC_OK, TOPIC_READ_ONLY = "T_grpc_acl_ok", "T_grpc_acl_read_only"


def creds(ak: str, sk: str) -> dict[str, str]:
    return {"GRPC_CLIENT_AK": ak, "GRPC_CLIENT_SK": sk}


@pytest.fixture(scope="module")
def acl_grpc_broker(tmp_path_factory):
    try:
        ensure_client_venv()
    except ClientVenvError as exc:
        pytest.fail(str(exc))
    root = tmp_path_factory.mktemp("grpcacl")
    home = root / "home"
    (home / "conf").mkdir(parents=True)
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
                        "topicPerms": [f"{TOPIC_OK}=PUB|SUB", f"{TOPIC_READ_ONLY}=SUB"],
                    },
                    {"accessKey": ADMIN_AK, "secretKey": ADMIN_SK, "admin": True},
                ],
            },
            sort_keys=False,
        )
    )
    factory = BrokerFactory(root)
    try:
        broker, endpoint = start_grpc_broker(factory, "aclEnable=true", f"rocketmqHome={home}")
        for topic in (TOPIC_OK, TOPIC_READ_ONLY):
            create_topic(broker, topic, "NORMAL", credentials=(ADMIN_AK, ADMIN_SK))
        yield broker, endpoint
    finally:
        factory.close()


def test_right_secret_sends_and_receives(acl_grpc_broker):
    _, endpoint = acl_grpc_broker
    group = unique("GACL5")
    sent = run_client(endpoint, "produce", {"topic": TOPIC_OK, "count": 3, "body": "acl-{i}"}, env=creds(AK, SK))
    assert len(sent.of("sent")) == 3, sent.describe()
    got = run_client(endpoint, "consume", {"topic": TOPIC_OK, "group": group, "count": 3}, env=creds(AK, SK))
    assert sorted(r["body"] for r in got.of("received")) == ["acl-0", "acl-1", "acl-2"], got.describe()
    assert len(got.of("acked")) == 3, got.describe()


@pytest.mark.parametrize(
    "env",
    [creds("", ""), creds(AK, "not_the_secret"), creds("grpc5_nobody", SK)],
    ids=["no-credentials", "wrong-secret", "unknown-key"],
)
def test_without_the_right_secret_nothing_is_sent_or_received(acl_grpc_broker, env):
    broker, endpoint = acl_grpc_broker
    mark = broker.log_size()
    sent = run_client(endpoint, "produce", {"topic": TOPIC_OK, "count": 1, "body": "forged"}, env=env)
    assert sent.of("sent") == [], sent.describe()
    assert sent.of("startup_failed") or sent.of("send_failed"), sent.describe()
    # refused three times in a row (or at startup) is enough; receiving on for the whole timeout proved no more
    got = run_client(
        endpoint,
        "consume",
        {"topic": TOPIC_OK, "group": unique("GACL5X"), "count": 1, "timeout_s": 4, "max_failures": 3},
        env=env,
    )
    assert got.of("received") == [] and got.of("startup_failed") + got.of("receive_failed"), got.describe()
    assert "grpc request refused by acl" in broker.log_text(mark)


def test_a_topic_the_account_may_only_read_is_refused_to_its_producer(acl_grpc_broker):
    _, endpoint = acl_grpc_broker
    sent = run_client(endpoint, "produce", {"topic": TOPIC_READ_ONLY, "count": 1}, env=creds(AK, SK))
    assert sent.of("sent") == [], sent.describe()
    (failure,) = sent.of("send_failed")
    assert failure["error"] == f"40100, No default permission for topic:{TOPIC_READ_ONLY}", sent.describe()
    # the admin account may publish to it
    sent = run_client(endpoint, "produce", {"topic": TOPIC_READ_ONLY, "count": 1}, env=creds(ADMIN_AK, ADMIN_SK))
    assert len(sent.of("sent")) == 1, sent.describe()
