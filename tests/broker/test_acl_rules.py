"""ACL 1.0 rules without a broker: permissions, white-list patterns, accounts, what each request code needs,
and PlainPermissionManager's checks, files, changes and hot reload. Expected texts are 4.9.7's."""

from __future__ import annotations

import os

import orjson
import pytest
import yaml

from broker.acl.account import PlainAccount
from broker.acl.errors import AclError
from broker.acl.permission import ANY, DENY, PUB, SUB, check_permission, check_resource_perms, need_admin, parse_perm
from broker.acl.permission_manager import AccessRequest, PlainPermissionManager
from broker.acl.remote_address import address_strategy, expand_ip, host_of
from broker.acl.validator import PlainAccessValidator, parse_access
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.signature import SessionCredentials, sign_request_fields

C = RequestCode


# ---------------------------------------------------------------------------------------------- permissions


@pytest.mark.parametrize(
    "text, perm",
    [
        ("PUB", PUB),
        ("SUB", SUB),
        ("PUB|SUB", PUB | SUB),
        ("SUB|PUB", PUB | SUB),
        (" SUB ", SUB),
        ("DENY", DENY),
        ("pub", DENY),
        ("", DENY),
        (None, DENY),
        ("PUB|SUB|X", DENY),
    ],
)
def test_perm_strings(text, perm):
    assert parse_perm(text) == perm


@pytest.mark.parametrize(
    "needed, owned, ok",
    [
        (PUB, PUB, True),
        (PUB, SUB, False),
        (SUB, PUB | SUB, True),
        (PUB, DENY, False),
        (PUB, DENY | PUB, False),
        (ANY, SUB, True),
        (ANY, PUB, True),
        (ANY, DENY, False),
        (SUB, 0, False),
    ],
)
def test_check_permission(needed, owned, ok):
    assert check_permission(needed, owned) is ok


def test_admin_codes_are_upstreams_five_plus_acl_and_fault_injection():
    for code in (
        C.UPDATE_AND_CREATE_TOPIC,
        C.UPDATE_BROKER_CONFIG,
        C.DELETE_TOPIC_IN_BROKER,
        C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        C.DELETE_SUBSCRIPTIONGROUP,
        C.UPDATE_AND_CREATE_ACL_CONFIG,
        C.DELETE_ACL_CONFIG,
        C.GET_BROKER_CLUSTER_ACL_INFO,
        C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        C.GET_BROKER_CLUSTER_ACL_CONFIG,
        C.FAULT_INJECT,
    ):
        assert need_admin(code), code
    for code in (C.SEND_MESSAGE, C.PULL_MESSAGE, C.GET_BROKER_RUNTIME_INFO, C.GET_ALL_TOPIC_CONFIG):
        assert not need_admin(code), code


def test_resource_perm_entries_an_admin_request_may_write():
    check_resource_perms(["a=PUB", "b=DENY", "c=SUB|PUB"])
    with pytest.raises(AclError, match="The expected resource format is 'Res=Perm'"):
        check_resource_perms(["a"])
    with pytest.raises(AclError, match="Parse resource permission error for a=XX"):
        check_resource_perms(["a=XX"])


# ---------------------------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    "pattern, address, ok",
    [
        ("*", "1.2.3.4", True),
        ("*.*.*.*", "1.2.3.4", True),
        ("", "1.2.3.4", False),
        (None, "1.2.3.4", False),
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "127.0.0.2", False),
        ("192.168.0.*", "192.168.0.77", True),
        ("192.168.0.*", "192.168.1.77", False),
        ("192.168.*.*", "192.168.9.1", True),
        ("192.168.*.*", "192.169.9.1", False),
        ("192.*.*.*", "192.8.9.1", True),
        ("192.168.0.1-10", "192.168.0.10", True),
        ("192.168.0.1-10", "192.168.0.11", False),
        ("192.168.1-3.*", "192.168.2.200", True),
        ("192.168.1-3.*", "192.168.4.1", False),
        ("192.168.0.{1,2}", "192.168.0.2", True),
        ("192.168.0.{1,2}", "192.168.0.3", False),
        ("10.0.0.1,10.0.0.2", "10.0.0.2", True),
        ("10.0.0.1,10.0.0.2", "10.0.0.3", False),
        ("::1", "0:0:0:0:0:0:0:1", True),
        ("1050::5:600:300c:326b", "1050:0:0:0:5:600:300C:326B", True),
        ("1050::5:600:300c:*", "1050:0:0:0:5:600:300C:1", True),
        ("1050::5:600:300c:*", "1050:0:0:0:5:600:300D:1", False),
        ("1050::5:600:300c:1-ff", "1050::5:600:300c:a0", True),
        ("1050::5:600:300c:1-ff", "1050::5:600:300c:1ff", False),
    ],
)
def test_address_patterns(pattern, address, ok):
    assert address_strategy(pattern).match(address) is ok


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("256.0.0.1", "Netaddress examine Exception netaddress is 256.0.0.1"),
        ("hello", "Netaddress examine Exception netaddress is hello"),
        ("10.0.0.1,nope", "Netaddress examine Exception netaddress is nope"),
        ("192.168.0.10-1", "start is 10 , end is 1"),
        ("192.168.0.-1", "RangeRemoteAddressStrategy netaddress examine scope Exception value -1"),
        ("192.168.{1,2}", "wrong format IP"),
    ],
)
def test_bad_address_patterns_are_refused_with_upstreams_message(pattern, message):
    with pytest.raises(AclError, match=message.replace("*", r"\*").replace("{", r"\{")):
        address_strategy(pattern)


def test_expand_ip_and_host_of():
    assert expand_ip("::1", 8) == "0000:0000:0000:0000:0000:0000:0000:0001"
    assert host_of("127.0.0.1:4567") == "127.0.0.1"
    assert host_of("[::1]:4567") == "::1"
    assert host_of(None) is None


# ---------------------------------------------------------------------------------------------- accounts


def test_account_from_yaml_groups_become_retry_topics_and_numbers_become_strings():
    data = yaml.safe_load(
        "accessKey: RocketMQ\nsecretKey: 12345678\nadmin: false\ndefaultTopicPerm: DENY\n"
        "topicPerms: [topicA=DENY, topicB=PUB|SUB]\ngroupPerms: [groupA=SUB]\n"
    )
    account = PlainAccount.from_config(data)
    assert account.secret_key == "12345678"
    assert account.default_topic_perm == DENY and account.default_group_perm == DENY
    assert dict(account.resource_perms) == {"%RETRY%groupA": SUB, "topicA": DENY, "topicB": PUB | SUB}
    assert "12345678" not in repr(account)


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"accessKey": "short", "secretKey": "12345678"},
            "The accessKey=short and secretKey=12345678 cannot be null and length should longer than 6",
        ),
        ({"accessKey": "longenough"}, "The accessKey=longenough and secretKey=null cannot be null"),
        (
            {"accessKey": "longenough", "secretKey": "12345678", "topicPerms": ["topicA"]},
            "Parse resource permission failed for topic:topicA",
        ),
        (
            {"accessKey": "longenough", "secretKey": "12345678", "whiteRemoteAddress": "bad"},
            "Netaddress examine Exception netaddress is bad",
        ),
    ],
)
def test_bad_accounts(data, message):
    with pytest.raises(AclError, match=message):
        PlainAccount.from_config(data)


# ---------------------------------------------------------------------------------------------- parse


def req(code, ext=None, body=None):
    return RemotingCommand.request(code, dict(ext or {}), body)


@pytest.mark.parametrize(
    "request_, needs",
    [
        (req(C.SEND_MESSAGE, {"topic": "T", "producerGroup": "PG"}), {"T": PUB}),
        # upstream reads a "group" field SEND_MESSAGE's header does not have: a retry send needs nothing
        (req(C.SEND_MESSAGE, {"topic": "%RETRY%G", "producerGroup": "PG"}), {}),
        (req(C.SEND_MESSAGE_V2, {"a": "PG", "b": "T"}), {"T": PUB}),
        (req(C.SEND_MESSAGE_V2, {"a": "PG", "b": "%RETRY%G"}), {"%RETRY%PG": SUB}),
        (req(C.SEND_BATCH_MESSAGE, {"a": "PG", "b": "T"}), {"T": PUB}),  # ours: 4.9.7 checks nothing here
        (req(C.CONSUMER_SEND_MSG_BACK, {"group": "G", "offset": "1"}), {"%RETRY%G": SUB}),
        (req(C.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"}), {"T": SUB, "%RETRY%G": SUB}),
        (req(C.QUERY_MESSAGE, {"topic": "T"}), {"T": SUB}),
        (
            req(
                C.HEART_BEAT,
                {},
                orjson.dumps(
                    {
                        "clientID": "c",
                        "producerDataSet": [{"groupName": "PG"}],
                        "consumerDataSet": [
                            {"groupName": "G", "subscriptionDataSet": [{"topic": "T"}, {"topic": "%RETRY%G"}]}
                        ],
                    }
                ),
            ),
            {"%RETRY%G": SUB, "T": SUB},
        ),
        (req(C.UNREGISTER_CLIENT, {"clientID": "c", "consumerGroup": "G"}), {"%RETRY%G": SUB}),
        (req(C.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}), {"%RETRY%G": SUB}),
        (
            req(C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": "0"}),
            {"%RETRY%G": SUB, "T": SUB},
        ),
        (req(C.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": "0"}), {}),
        (req(C.GET_BROKER_RUNTIME_INFO), {}),
    ],
)
def test_what_each_code_needs(request_, needs):
    request_.ext_fields["AccessKey"] = "user_0001"  # a request without ext fields needs nothing (upstream)
    access = parse_access(request_, "10.0.0.1:1234")
    assert access.resources == needs
    assert access.remote_host == "10.0.0.1"


@pytest.mark.parametrize(
    "body", [None, b"not json", b"[1]", orjson.dumps({"consumerDataSet": "x"}), orjson.dumps({"consumerDataSet": [1]})]
)
def test_a_malformed_heartbeat_is_an_acl_error_not_a_crash(body):
    with pytest.raises(AclError) as info:
        parse_access(req(C.HEART_BEAT, {"AccessKey": "x"}, body), "10.0.0.1:1")
    assert info.value.remark.startswith("org.apache.rocketmq.acl.common.AclException: ")


# ---------------------------------------------------------------------------------------------- manager

USER = {
    "accessKey": "user_0001",
    "secretKey": "secret_0001",
    "defaultTopicPerm": "DENY",
    "defaultGroupPerm": "SUB",
    "topicPerms": ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"],
    "groupPerms": ["groupA=DENY"],
}
ADMIN = {"accessKey": "admin_0001", "secretKey": "secret_0002", "admin": True}


def write_acl(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # a rewrite within the same clock tick must still look changed to the watcher
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


@pytest.fixture
def home(tmp_path):
    write_acl(
        tmp_path / "conf" / "plain_acl.yml", {"globalWhiteRemoteAddresses": ["10.10.103.*"], "accounts": [USER, ADMIN]}
    )
    return tmp_path


@pytest.fixture
def manager(home):
    m = PlainPermissionManager(str(home), now_ms=lambda: 1_700_000_000_000)
    m.load()
    return m


def signed(code, ext, body=None, ak="user_0001", sk="secret_0001"):
    request = req(code, ext, body)
    sign_request_fields(request.ext_fields, body, SessionCredentials(ak, sk))
    return request


def check(manager, request, remote="127.0.0.1:5555"):
    """None when allowed, else the refusal's remark."""
    response = PlainAccessValidator(manager)(type("Ch", (), {"remote_addr": remote})(), request)
    if response is None:
        return None
    assert response.code == ResponseCode.SYSTEM_ERROR
    return response.remark


SEND_B = {"a": "PG", "b": "topicB", "c": "TBW102"}


def test_signed_request_with_the_right_secret_passes(manager):
    assert check(manager, signed(C.SEND_MESSAGE_V2, SEND_B, b"body")) is None


@pytest.mark.parametrize(
    "make, message, frame",
    [
        (
            lambda: req(C.SEND_MESSAGE_V2, SEND_B),
            "No accessKey is configured",
            "validate(PlainPermissionManager.java:663)",
        ),
        (
            lambda: signed(C.SEND_MESSAGE_V2, SEND_B, ak="nobody_01"),
            "No acl config for nobody_01",
            "validate(PlainPermissionManager.java:667)",
        ),
        (
            lambda: signed(C.SEND_MESSAGE_V2, SEND_B, sk="wrong_secret"),
            "Check signature failed for accessKey=user_0001",
            "validate(PlainPermissionManager.java:683)",
        ),
        (
            lambda: signed(C.SEND_MESSAGE_V2, {**SEND_B, "b": "topicA"}),
            "No default permission for topic:topicA",
            "checkPerm(PlainPermissionManager.java:610)",
        ),
        (
            lambda: signed(C.SEND_MESSAGE_V2, {**SEND_B, "b": "topicC"}),
            "No default permission for topic:topicC",
            "checkPerm(PlainPermissionManager.java:610)",
        ),
        (
            lambda: signed(C.SEND_MESSAGE_V2, {**SEND_B, "b": "other"}),
            "No default permission for topic:other",
            "checkPerm(PlainPermissionManager.java:605)",
        ),
        (
            lambda: signed(C.PULL_MESSAGE, {"topic": "topicB", "consumerGroup": "groupA"}),
            "No default permission for group:groupA",
            "checkPerm(PlainPermissionManager.java:610)",
        ),
        (
            lambda: signed(C.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}),
            "Need admin permission for request code=17, but accessKey=user_0001 is not",
            "checkPerm(PlainPermissionManager.java:580)",
        ),
        (
            lambda: signed(C.FAULT_INJECT, {"kind": "clear"}),
            "Need admin permission for request code=5001, but accessKey=user_0001 is not",
            "checkPerm(PlainPermissionManager.java:580)",
        ),
    ],
)
def test_refusals_carry_upstreams_remark(manager, make, message, frame):
    remark = check(manager, make())
    assert remark == (
        f"org.apache.rocketmq.acl.common.AclException: {message}, "
        f"org.apache.rocketmq.acl.plain.PlainPermissionManager.{frame}"
    )


def test_a_tampered_body_or_header_fails_the_signature(manager):
    request = signed(C.SEND_MESSAGE_V2, SEND_B, b"body")
    request.body = b"bodY"
    assert "Check signature failed" in check(manager, request)
    request = signed(C.SEND_MESSAGE_V2, SEND_B, b"body")
    request.ext_fields["b"] = "topicC"
    assert "Check signature failed" in check(manager, request)


def test_default_group_perm_lets_a_consumer_pull(manager):
    assert check(manager, signed(C.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "anyGroup"})) is None


def test_admin_passes_admin_codes_and_any_resource(manager):
    for code, ext in (
        (C.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}),
        (C.SEND_MESSAGE_V2, SEND_B),
        (C.FAULT_INJECT, {"kind": "clear"}),
        (C.GET_BROKER_CLUSTER_ACL_CONFIG, {}),
    ):
        assert check(manager, signed(code, ext, ak="admin_0001", sk="secret_0002")) is None


def test_the_global_white_list_skips_every_check(manager):
    assert check(manager, req(C.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}), remote="10.10.103.9:1") is None


def test_an_accounts_white_address_skips_signature_and_permissions(home):
    write_acl(home / "conf" / "plain_acl.yml", {"accounts": [{**USER, "whiteRemoteAddress": "127.0.0.*"}]})
    m = PlainPermissionManager(str(home))
    m.load()
    request = signed(C.SEND_MESSAGE_V2, {**SEND_B, "b": "topicA"}, sk="wrong_secret")
    assert check(m, request, remote="127.0.0.9:1") is None
    assert "Check signature failed" in check(m, request, remote="127.0.1.9:1")


def test_trace_topic_pub_is_always_allowed(manager):
    assert check(manager, signed(C.SEND_MESSAGE_V2, {**SEND_B, "b": "RMQ_SYS_TRACE_TOPIC"})) is None


def test_missing_default_file_is_created_and_means_no_accounts(tmp_path):
    m = PlainPermissionManager(str(tmp_path / "home"))
    m.load()
    assert (tmp_path / "home" / "conf" / "plain_acl.yml").is_file()
    assert "No acl config for user_0001" in check(m, signed(C.SEND_MESSAGE_V2, SEND_B))


def test_acl_dir_files_count_and_a_duplicate_key_keeps_the_first(home):
    write_acl(
        home / "conf" / "acl" / "a.yml",
        {
            "accounts": [{**USER, "secretKey": "other_secret"}, {**USER, "accessKey": "user_0003"}],
            "globalWhiteRemoteAddresses": ["172.16.0.1"],
        },
    )
    m = PlainPermissionManager(str(home))
    m.load()
    assert set(m.tables.accounts) == {"user_0001", "user_0003", "admin_0001"}
    assert m.tables.accounts["user_0001"].secret_key == "other_secret"  # conf/acl comes before plain_acl.yml
    assert check(m, req(C.UPDATE_AND_CREATE_TOPIC), remote="172.16.0.1:1") is None
    assert check(m, req(C.UPDATE_AND_CREATE_TOPIC), remote="10.10.103.1:1") is None


def test_hot_reload_picks_up_a_changed_file(home, manager):
    assert manager.reload_if_changed() is False
    new_user = {"accessKey": "user_0009", "secretKey": "secret_0009", "defaultTopicPerm": "PUB"}
    write_acl(home / "conf" / "plain_acl.yml", {"accounts": [new_user]})
    assert manager.reload_if_changed() is True
    assert check(manager, signed(C.SEND_MESSAGE_V2, SEND_B, ak="user_0009", sk="secret_0009")) is None
    assert "No acl config for user_0001" in check(manager, signed(C.SEND_MESSAGE_V2, SEND_B))
    assert check(manager, req(C.UPDATE_AND_CREATE_TOPIC), remote="10.10.103.1:1") is not None  # list gone


def test_hot_reload_of_a_new_acl_dir_file(home, manager):
    write_acl(
        home / "conf" / "acl" / "more.yaml", {"accounts": [{"accessKey": "user_0009", "secretKey": "secret_0009"}]}
    )
    assert manager.reload_if_changed() is True
    assert "user_0009" in manager.tables.accounts


def test_a_broken_file_keeps_the_previous_rules(home, manager, caplog):
    before = manager.tables
    (home / "conf" / "plain_acl.yml").write_text("accounts: [ {accessKey: x\n")
    assert manager.reload_if_changed() is False
    assert manager.tables is before
    assert manager.reload_if_changed() is False  # not retried (nor logged) again until the file changes
    write_acl(home / "conf" / "plain_acl.yml", {"accounts": [{"accessKey": "short", "secretKey": "x"}]})
    assert manager.reload_if_changed() is False
    assert manager.tables is before


def test_a_broken_file_at_boot_is_an_error(home):
    (home / "conf" / "plain_acl.yml").write_text("accounts: {not: a list}\n")
    with pytest.raises(AclError, match="expected a list"):
        PlainPermissionManager(str(home)).load()


# ---------------------------------------------------------------------------------------------- changes


def read(home, name="plain_acl.yml"):
    return yaml.safe_load((home / "conf" / name).read_text())


def test_create_then_update_an_account_in_place(home, manager):
    assert manager.update_access_config(
        {
            "accessKey": "user_0005",
            "secretKey": "secret_0005",
            "admin": False,
            "defaultTopicPerm": "PUB",
            "topicPerms": ["x=SUB"],
            "groupPerms": None,
        }
    )
    data = read(home)
    assert data["accounts"][-1] == {
        "accessKey": "user_0005",
        "secretKey": "secret_0005",
        "admin": False,
        "defaultTopicPerm": "PUB",
        "topicPerms": ["x=SUB"],
    }
    assert data["dataVersion"] == [{"counter": 1, "timestamp": 1_700_000_000_000}]
    assert "user_0005" in manager.tables.accounts  # effective at once, not after the watcher's tick
    manager.update_access_config({"accessKey": "user_0005", "secretKey": "secret_0006", "admin": True})
    data = read(home)
    assert [a["accessKey"] for a in data["accounts"]].count("user_0005") == 1
    assert data["accounts"][-1]["secretKey"] == "secret_0006" and data["accounts"][-1]["admin"] is True
    assert data["accounts"][-1]["topicPerms"] == ["x=SUB"]  # kept: the request did not name them
    assert data["dataVersion"][0]["counter"] == 2
    assert manager.version_info()[0]["counter"] == 2


def test_an_account_is_updated_in_the_file_that_defines_it(home):
    write_acl(
        home / "conf" / "acl" / "team.yml", {"accounts": [{"accessKey": "user_0007", "secretKey": "secret_0007"}]}
    )
    m = PlainPermissionManager(str(home))
    m.load()
    m.update_access_config({"accessKey": "user_0007", "secretKey": "secret_0008"})
    assert read(home, "acl/team.yml")["accounts"][0]["secretKey"] == "secret_0008"
    assert all(a["accessKey"] != "user_0007" for a in read(home)["accounts"])


@pytest.mark.parametrize(
    "config, message",
    [
        ({"accessKey": "short", "secretKey": "secret_0005"}, "The accessKey=short and secretKey=secret_0005"),
        ({"accessKey": "user_0005", "secretKey": "secret_0005", "topicPerms": ["a=XX"]}, "Parse resource permission"),
        ({"accessKey": "user_0005", "secretKey": "secret_0005", "whiteRemoteAddress": "nope"}, "Netaddress examine"),
    ],
)
def test_bad_account_changes_are_refused_and_change_nothing(home, manager, config, message):
    before = (home / "conf" / "plain_acl.yml").read_text()
    with pytest.raises(AclError, match=message):
        manager.update_access_config(config)
    assert (home / "conf" / "plain_acl.yml").read_text() == before


def test_delete_an_account(home, manager):
    assert manager.delete_access_config("user_0001") is True
    assert [a["accessKey"] for a in read(home)["accounts"]] == ["admin_0001"]
    assert "user_0001" not in manager.tables.accounts
    assert manager.delete_access_config("user_0001") is False
    assert manager.delete_access_config("") is False


def test_global_white_list_update_only_in_acl_files(home, manager, tmp_path):
    assert manager.update_global_white_addrs(["192.168.9.*"], None) is True
    assert read(home)["globalWhiteRemoteAddresses"] == ["192.168.9.*"]
    assert check(manager, req(C.UPDATE_AND_CREATE_TOPIC), remote="192.168.9.4:1") is None
    outside = tmp_path / "elsewhere.yml"
    outside.write_text("x: 1\n")
    sneaky = str(home / "conf" / ".." / ".." / "elsewhere.yml")
    assert manager.update_global_white_addrs(["*"], sneaky) is False
    assert outside.read_text() == "x: 1\n"
    assert manager.update_global_white_addrs(None, None) is False
    with pytest.raises(AclError):
        manager.update_global_white_addrs(["300.1.1.1"], None)


def test_all_config_lists_accounts_as_fastjson_would(manager):
    body = manager.all_config()
    assert body["globalWhiteAddrs"] == ["10.10.103.*"]
    assert body["plainAccessConfigs"][0] == {
        "accessKey": "user_0001",
        "admin": False,
        "defaultGroupPerm": "SUB",
        "defaultTopicPerm": "DENY",
        "groupPerms": ["groupA=DENY"],
        "secretKey": "secret_0001",
        "topicPerms": ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"],
    }
    assert body["plainAccessConfigs"][1] == {"accessKey": "admin_0001", "admin": True, "secretKey": "secret_0002"}


def test_access_request_defaults():
    access = AccessRequest(code=10, remote_host=None)
    access.need(None, PUB)
    assert access.resources == {} and access.signature_for is None
