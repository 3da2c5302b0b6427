"""ACL 1.0 in a running broker: the hook before every broker processor, not on the name server port; the admin
codes 50-54; fault injection and config changes behind an admin account; nothing in the way with ACL off."""

from __future__ import annotations

import orjson
import pytest
import yaml
from broker_helpers import send_request, start_broker

from broker.config import ConfigError
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.signature import SessionCredentials

USER = SessionCredentials("user_0001", "secret_0001")
ADMIN = SessionCredentials("admin_0001", "secret_0002")
ACL = {
    "accounts": [
        {
            "accessKey": "user_0001",
            "secretKey": "secret_0001",
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "SUB",
            "topicPerms": ["T_acl=PUB|SUB"],
        },
        {"accessKey": "admin_0001", "secretKey": "secret_0002", "admin": True},
    ]
}


@pytest.fixture
async def acl_broker(tmp_path):
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(yaml.safe_dump(ACL, sort_keys=False))
    controller = await start_broker(tmp_path, aclEnable="true", rocketmqHome=str(home), faultInjectionEnable="true")
    yield controller
    await controller.shutdown()


async def call(controller, request, credentials=None):
    client = RemotingClient(credentials=credentials)
    try:
        return await client.invoke(controller.config.broker_addr, request, 5)
    finally:
        await client.close()


def no_ak_remark() -> str:
    return (
        "org.apache.rocketmq.acl.common.AclException: No accessKey is configured, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:663)"
    )


async def test_unsigned_send_is_refused_and_not_stored(acl_broker):
    resp = await call(acl_broker, send_request("T_acl", b"unsigned"))
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, no_ak_remark())
    assert acl_broker.store.get_max_offset_in_queue("T_acl", 0) == 0


async def test_signed_send_is_stored(acl_broker):
    resp = await call(acl_broker, send_request("T_acl", b"signed"), USER)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert acl_broker.store.get_max_offset_in_queue("T_acl", 0) == 1


async def test_wrong_secret_is_refused(acl_broker):
    resp = await call(acl_broker, send_request("T_acl", b"x"), SessionCredentials("user_0001", "not_secret"))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "Check signature failed for accessKey=user_0001" in resp.remark


async def test_unknown_codes_are_checked_too(acl_broker):
    resp = await call(acl_broker, RemotingCommand.request(9999, {}))
    assert resp.remark == no_ak_remark()
    resp = await call(acl_broker, RemotingCommand.request(9999, {}), USER)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_the_name_server_port_is_not_checked(acl_broker):
    client = RemotingClient()
    try:
        resp = await client.invoke(
            f"127.0.0.1:{acl_broker.config.namesrv_listen_port}",
            RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {}),
            5,
        )
    finally:
        await client.close()
    assert resp.code == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    "request_",
    [
        RemotingCommand.request(RequestCode.FAULT_INJECT, {"kind": "clear"}),
        RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, {}, b"maxMessageSize=1\n"),
        RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T_acl"}),
        RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, {}),
    ],
    ids=["fault_inject", "update_broker_config", "delete_topic", "acl_config"],
)
async def test_admin_codes_need_an_admin_account(acl_broker, request_):
    max_size = acl_broker.config.max_message_size
    resp = await call(
        acl_broker, RemotingCommand.request(request_.code, dict(request_.ext_fields), request_.body), USER
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert f"Need admin permission for request code={request_.code}, but accessKey=user_0001 is not" in resp.remark
    assert acl_broker.config.max_message_size == max_size
    resp = await call(
        acl_broker, RemotingCommand.request(request_.code, dict(request_.ext_fields), request_.body), ADMIN
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_acl_enable_cannot_be_switched_at_run_time(acl_broker):
    request = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, {}, b"aclEnable=false\n")
    resp = await call(acl_broker, request, ADMIN)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "cannot change while the broker runs: aclEnable" in resp.remark
    assert acl_broker.config.acl_enable


async def test_admin_codes_50_to_54(acl_broker):
    resp = await call(
        acl_broker,
        RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
            {"accessKey": "user_0002", "secretKey": "secret_0003", "defaultTopicPerm": "PUB", "admin": "false"},
        ),
        ADMIN,
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    # effective at once
    resp = await call(acl_broker, send_request("T_other", b"x"), SessionCredentials("user_0002", "secret_0003"))
    assert resp.code == ResponseCode.SUCCESS, resp.remark

    resp = await call(acl_broker, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {}), ADMIN)
    assert resp.code == ResponseCode.SUCCESS
    assert resp.ext_fields["brokerAddr"] == acl_broker.config.broker_addr
    assert orjson.loads(resp.ext_fields["version"])["counter"] == 1
    path = str(acl_broker.acl.default_file)
    assert orjson.loads(resp.ext_fields["allAclFileVersion"])[path]["counter"] == 1

    resp = await call(acl_broker, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, {}), ADMIN)
    configs = orjson.loads(resp.body)["plainAccessConfigs"]
    assert [c["accessKey"] for c in configs] == ["user_0001", "admin_0001", "user_0002"]

    resp = await call(
        acl_broker,
        RemotingCommand.request(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "127.0.0.1"}),
        ADMIN,
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    resp = await call(acl_broker, send_request("T_denied_before", b"x"))  # unsigned, from a white address
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    resp = await call(
        acl_broker,
        RemotingCommand.request(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "10.0.0.1"}),
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark

    resp = await call(
        acl_broker, RemotingCommand.request(RequestCode.DELETE_ACL_CONFIG, {"accessKey": "user_0002"}), ADMIN
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    resp = await call(acl_broker, send_request("T_other", b"x"), SessionCredentials("user_0002", "secret_0003"))
    assert "No acl config for user_0002" in resp.remark
    resp = await call(
        acl_broker, RemotingCommand.request(RequestCode.DELETE_ACL_CONFIG, {"accessKey": "user_0002"}), ADMIN
    )
    assert (resp.code, resp.remark) == (
        ResponseCode.DELETE_ACL_CONFIG_FAILED,
        "The accesskey[user_0002] corresponding to accessConfig has been deleted failed.",
    )


async def test_bad_acl_change_answers_the_failure_code(acl_broker):
    resp = await call(
        acl_broker,
        RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "short", "secretKey": "secret_0003"}
        ),
        ADMIN,
    )
    assert resp.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
    assert resp.remark == "The accessKey=short and secretKey=secret_0003 cannot be null and length should longer than 6"
    resp = await call(acl_broker, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {}), ADMIN)
    assert resp.code == ResponseCode.SYSTEM_ERROR  # header decode: accessKey is required


async def test_hot_reload_in_the_running_broker(acl_broker):
    path = acl_broker.acl.default_file
    data = yaml.safe_load(open(path))
    data["accounts"].append({"accessKey": "user_0004", "secretKey": "secret_0004", "defaultTopicPerm": "PUB"})
    with open(path, "w") as fh:
        yaml.safe_dump(data, fh)
    assert acl_broker.acl.reload_if_changed()  # what the 5 s watcher calls
    resp = await call(acl_broker, send_request("T_any", b"x"), SessionCredentials("user_0004", "secret_0004"))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_acl_off_installs_no_hook_and_ignores_signatures(tmp_path):
    controller = await start_broker(tmp_path)
    try:
        assert controller.acl is None and controller.server._hook is None
        resp = await call(controller, send_request("T_open", b"x"))
        assert resp.code == ResponseCode.SUCCESS
        resp = await call(controller, send_request("T_open", b"x"), SessionCredentials("whoever1", "whatever1"))
        assert resp.code == ResponseCode.SUCCESS
        resp = await call(controller, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, {}))
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "The broker does not enable acl")
    finally:
        await controller.shutdown()


async def test_an_unloadable_acl_file_stops_the_boot_with_one_clear_error(tmp_path):
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text("accounts:\n  - accessKey: short\n    secretKey: x\n")
    with pytest.raises(ConfigError, match="acl: The accessKey=short"):
        await start_broker(tmp_path, aclEnable="true", rocketmqHome=str(home))


async def test_acl_home_defaults_to_the_store_root(tmp_path, monkeypatch):
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    controller = await start_broker(tmp_path, aclEnable="true")
    try:
        assert controller.acl.default_file == str(tmp_path / "store" / "conf" / "plain_acl.yml")
    finally:
        await controller.shutdown()


async def test_the_watcher_reloads_a_changed_file_by_itself(tmp_path, monkeypatch):
    import asyncio

    import broker.controller

    monkeypatch.setattr(broker.controller, "ACL_WATCH_INTERVAL_S", 0.05)
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(yaml.safe_dump(ACL, sort_keys=False))
    controller = await start_broker(tmp_path, aclEnable="true", rocketmqHome=str(home))
    try:
        newcomer = SessionCredentials("user_0005", "secret_0005")
        resp = await call(controller, send_request("T_any", b"x"), newcomer)
        assert "No acl config for user_0005" in resp.remark
        (home / "conf" / "acl").mkdir()
        (home / "conf" / "acl" / "team.yml").write_text(
            yaml.safe_dump(
                {"accounts": [{"accessKey": "user_0005", "secretKey": "secret_0005", "defaultTopicPerm": "PUB"}]}
            )
        )
        for _ in range(100):
            if "user_0005" in controller.acl.tables.accounts:
                break
            await asyncio.sleep(0.05)
        resp = await call(controller, send_request("T_any", b"x"), newcomer)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        await controller.shutdown()


def test_mqbroker_with_a_bad_acl_file_exits_with_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from broker_helpers import free_port

    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text("globalWhiteRemoteAddresses: [300.1.1.1]\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.main",
            "--set",
            f"listenPort={free_port()}",
            "--set",
            "namesrvListenPort=-1",
            "--set",
            "brokerIP1=127.0.0.1",
            "--set",
            "listenHost=127.0.0.1",
            "--set",
            f"storePathRootDir={tmp_path / 'store'}",
            "--set",
            "aclEnable=true",
            "--set",
            f"rocketmqHome={home}",
        ],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "mqbroker: cannot start: acl: Netaddress examine Exception netaddress is 300.1.1.1" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
