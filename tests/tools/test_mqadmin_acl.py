"""``mqadmin`` against a broker with aclEnable=true: --ak/--sk sign every request; upstream's acl commands."""

from __future__ import annotations

import json

import pytest
import yaml
from tools_helpers import run_cli

ADMIN = ["--ak", "admin_0001", "--sk", "secret_0002"]


@pytest.fixture
def acl_broker(rocketmq_broker_factory, tmp_path):
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(
        yaml.safe_dump(
            {
                "accounts": [
                    {"accessKey": "user_0001", "secretKey": "secret_0001", "defaultTopicPerm": "PUB"},
                    {"accessKey": "admin_0001", "secretKey": "secret_0002", "admin": True},
                ]
            }
        )
    )
    return rocketmq_broker_factory(aclEnable="true", rocketmqHome=str(home))


def test_unsigned_admin_command_is_refused_with_upstreams_reason(capsys, acl_broker):
    code, _, err = run_cli(capsys, acl_broker, "brokerStatus", "-b", acl_broker.broker_addr)
    assert code == 1
    assert "AclException: No accessKey is configured" in err


def test_non_admin_account_cannot_create_topics(capsys, acl_broker):
    code, _, err = run_cli(
        capsys,
        acl_broker,
        "updateTopic",
        "-b",
        acl_broker.broker_addr,
        "-t",
        "T_x",
        "--ak",
        "user_0001",
        "--sk",
        "secret_0001",
    )
    assert code == 1
    assert "Need admin permission for request code=17, but accessKey=user_0001 is not" in err


def test_ak_without_sk_is_a_usage_error(capsys, acl_broker):
    code, _, err = run_cli(capsys, acl_broker, "brokerStatus", "-b", acl_broker.broker_addr, "--ak", "admin_0001")
    assert code == 2 and "--sk" in err


def test_acl_commands_round_trip(capsys, acl_broker):
    b = acl_broker.broker_addr
    code, out, err = run_cli(
        capsys,
        acl_broker,
        "updateAclConfig",
        "-b",
        b,
        "-a",
        "user_0002",
        "-s",
        "secret_0003",
        "-t",
        "topicA=PUB,topicB=SUB",
        "-g",
        "groupA=SUB",
        "-i",
        "DENY",
        "-u",
        "SUB",
        "-m",
        "false",
        *ADMIN,
    )
    assert code == 0, err
    assert out.strip() == f"create or update plain access config to {b} success."

    code, out, err = run_cli(capsys, acl_broker, "getAclConfig", "-b", b, "--json", *ADMIN)
    assert code == 0, err
    accounts = {a["accessKey"]: a for a in json.loads(out)[b]["plainAccessConfigs"]}
    assert accounts["user_0002"] == {
        "accessKey": "user_0002",
        "secretKey": "secret_0003",
        "admin": False,
        "defaultTopicPerm": "DENY",
        "defaultGroupPerm": "SUB",
        "topicPerms": ["topicA=PUB", "topicB=SUB"],
        "groupPerms": ["groupA=SUB"],
    }

    code, out, err = run_cli(capsys, acl_broker, "clusterAclConfigVersion", "-b", b, *ADMIN)
    assert code == 0, err
    assert "#AclConfigVersionNum" in out and "plain_acl.yml" in out

    code, out, err = run_cli(capsys, acl_broker, "updateGlobalWhiteAddr", "-b", b, "-g", "10.1.1.*,10.2.2.2", *ADMIN)
    assert code == 0, err
    code, out, err = run_cli(capsys, acl_broker, "getAclConfig", "-b", b, *ADMIN)
    assert "globalWhiteRemoteAddresses: [10.1.1.*, 10.2.2.2]" in out

    code, out, err = run_cli(capsys, acl_broker, "deleteAclConfig", "-b", b, "-a", "user_0002", *ADMIN)
    assert code == 0, err
    code, out, err = run_cli(capsys, acl_broker, "deleteAclConfig", "-b", b, "-a", "user_0002", *ADMIN)
    assert code == 1 and "code 210" in err


def test_a_non_admin_account_cannot_change_the_acl(capsys, acl_broker):
    code, _, err = run_cli(
        capsys,
        acl_broker,
        "updateAclConfig",
        "-b",
        acl_broker.broker_addr,
        "-a",
        "user_0009",
        "-s",
        "secret_0009",
        "-m",
        "true",
        "--ak",
        "user_0001",
        "--sk",
        "secret_0001",
    )
    assert code == 1
    assert "Need admin permission for request code=50" in err


def test_env_credentials(capsys, acl_broker, monkeypatch):
    monkeypatch.setenv("ROCKETMQ_ACCESS_KEY", "admin_0001")
    monkeypatch.setenv("ROCKETMQ_SECRET_KEY", "secret_0002")
    code, _, err = run_cli(capsys, acl_broker, "brokerStatus", "-b", acl_broker.broker_addr)
    assert code == 0, err
