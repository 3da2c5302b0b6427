"""ACL 1.0 on the 5.x endpoint: the broker's accounts decide, with 5.x's signed metadata and UNAUTHORIZED.

An in-process broker with aclEnable=true and its gRPC endpoint (plaintext) on a free port, driven with our
generated stub and metadata signed as apache/rocketmq-clients sign it.
"""

from __future__ import annotations

import hmac
from hashlib import sha1

import pytest
import yaml
from google.protobuf.duration_pb2 import Duration

from broker.acl.validator import PlainAccessValidator
from proxy.auth import parse_authorization, signed_metadata
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb
from proxy.protocol.service_pb2_grpc import MessagingServiceStub
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from tests.broker.broker_helpers import FakeChannel
from tests.proxy.grpc_endpoint import plaintext_endpoint

AK, SK = "grpc_user", "grpc_user_secret"
ADMIN_AK, ADMIN_SK = "grpc_admin", "grpc_admin_secret"
OWN, READ_ONLY, OTHER = "GrpcAclOwn", "GrpcAclReadOnly", "GrpcAclOther"
GROUP, DENIED_GROUP = "GrpcAclGroup", "GrpcAclDeniedGroup"
ACL = {
    "globalWhiteRemoteAddresses": ["10.10.103.*"],
    "accounts": [
        {
            "accessKey": AK,
            "secretKey": SK,
            "admin": False,
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "SUB",
            "topicPerms": [f"{OWN}=PUB|SUB", f"{READ_ONLY}=SUB"],
            "groupPerms": [f"{DENIED_GROUP}=DENY"],
        },
        {"accessKey": ADMIN_AK, "secretKey": ADMIN_SK, "admin": True},
    ],
}
DATE = "20261124T151402Z"


def signed(ak: str | None, sk: str | None, client: str = "acl-client") -> tuple[tuple[str, str], ...]:
    meta = [("x-mq-client-id", client), ("x-mq-date-time", DATE)]
    if ak is not None:
        signature = hmac.new(sk.encode(), DATE.encode(), sha1).hexdigest()
        value = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}"
        meta.append(("authorization", value))
    return tuple(meta)


USER = signed(AK, SK)


@pytest.fixture
async def acl_endpoint(tmp_path):
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(yaml.safe_dump(ACL, sort_keys=False))

    def create_topics(broker) -> None:
        for topic in (OWN, READ_ONLY, OTHER):
            broker._create_topic_for_route(topic)

    async with plaintext_endpoint(tmp_path, prepare=create_topics, aclEnable="true", rocketmqHome=str(home)) as (
        broker,
        channel,
    ):
        yield broker, MessagingServiceStub(channel)


def send_request(topic: str, body: bytes = b"x") -> spb.SendMessageRequest:
    msg = pb.Message(topic=pb.Resource(name=topic), body=body)
    msg.system_properties.message_id = "0102FC00000001000000000000000001"
    msg.system_properties.message_type = pb.NORMAL
    return spb.SendMessageRequest(messages=[msg])


async def receive(stub, topic: str, group: str, metadata) -> list[spb.ReceiveMessageResponse]:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        batch_size=1,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=2),
    )
    return [r async for r in stub.ReceiveMessage(request, metadata=metadata)]


def test_authorization_header_is_parsed_as_the_clients_write_it():
    assert parse_authorization("MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=0aF1") == (
        "ak",
        "0aF1",
    )
    assert parse_authorization("MQv2-HMAC-SHA1 Credential=ak/2026/region, Signature=ab")[0] == "ak"


async def test_right_secret_sends_receives_and_acks(acl_endpoint):
    _, stub = acl_endpoint
    sent = await stub.SendMessage(send_request(OWN, b"signed"), metadata=USER)
    assert sent.status.code == pb.OK, sent.status
    heartbeat = await stub.Heartbeat(
        spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=pb.Resource(name=GROUP)), metadata=USER
    )
    assert heartbeat.status.code == pb.OK, heartbeat.status
    responses = await receive(stub, OWN, GROUP, USER)
    (got,) = [r.message for r in responses if r.HasField("message")]
    assert got.body == b"signed"
    ack = await stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name=GROUP),
            topic=pb.Resource(name=OWN),
            entries=[
                spb.AckMessageEntry(
                    message_id=got.system_properties.message_id, receipt_handle=got.system_properties.receipt_handle
                )
            ],
        ),
        metadata=USER,
    )
    assert ack.status.code == pb.OK, ack.status


@pytest.mark.parametrize(
    "metadata, reason",
    [
        (signed(None, None), "No accessKey is configured"),
        (signed("", ""), "No accessKey is configured"),  # the Python client's empty Credentials
        (signed(AK, "wrong_secret"), f"Check signature failed for accessKey={AK}"),
        (signed("nobody", SK), "No acl config for nobody"),
        ((("x-mq-client-id", "c"), ("authorization", "Bearer abc")), "is not MQv2-HMAC-SHA1"),
        ((("x-mq-client-id", "c"), ("authorization", "MQv2-HMAC-SHA1 Credential=x")), "no Credential or no Signature"),
    ],
)
async def test_calls_without_the_right_credentials_are_unauthorized(acl_endpoint, metadata, reason):
    broker, stub = acl_endpoint
    sent = await stub.SendMessage(send_request(OWN), metadata=metadata)
    assert sent.status.code == pb.UNAUTHORIZED and reason in sent.status.message
    route = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=OWN)), metadata=metadata)
    assert route.status.code == pb.UNAUTHORIZED
    (r,) = await receive(stub, OWN, GROUP, metadata)
    assert r.status.code == pb.UNAUTHORIZED
    assert broker.store.get_max_offset_in_queue(OWN, 0) == 0


async def test_topic_and_group_permissions_apply(acl_endpoint):
    broker, stub = acl_endpoint
    for topic in (READ_ONLY, OTHER):  # SUB only, and the DENY default
        sent = await stub.SendMessage(send_request(topic), metadata=USER)
        assert sent.status.code == pb.UNAUTHORIZED and "No default permission for" in sent.status.message
        assert broker.store.get_max_offset_in_queue(topic, 0) == 0
    (r,) = await receive(stub, OTHER, GROUP, USER)
    assert r.status.code == pb.UNAUTHORIZED
    (r,) = await receive(stub, OWN, DENIED_GROUP, USER)
    assert r.status.code == pb.UNAUTHORIZED
    for call, request in (
        (
            stub.AckMessage,
            spb.AckMessageRequest(
                group=pb.Resource(name=GROUP),
                topic=pb.Resource(name=OTHER),
                entries=[spb.AckMessageEntry(receipt_handle="x")],
            ),
        ),
        (
            stub.ChangeInvisibleDuration,
            spb.ChangeInvisibleDurationRequest(
                group=pb.Resource(name=DENIED_GROUP),
                topic=pb.Resource(name=OWN),
                receipt_handle="x",
                invisible_duration=Duration(seconds=5),
            ),
        ),
        (
            stub.QueryAssignment,
            spb.QueryAssignmentRequest(group=pb.Resource(name=GROUP), topic=pb.Resource(name=OTHER)),
        ),
        (stub.Heartbeat, spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=pb.Resource(name=DENIED_GROUP))),
    ):
        response = await call(request, metadata=USER)
        assert response.status.code == pb.UNAUTHORIZED, (call, response.status)
    # the read-only topic may still be read
    (r,) = await receive(stub, READ_ONLY, GROUP, USER)
    assert r.status.code != pb.UNAUTHORIZED
    # an admin account may publish anywhere
    sent = await stub.SendMessage(send_request(OTHER), metadata=signed(ADMIN_AK, ADMIN_SK))
    assert sent.status.code == pb.OK, sent.status


async def test_telemetry_settings_are_checked(acl_endpoint):
    _, stub = acl_endpoint

    async def settings(topic: str, metadata) -> spb.TelemetryCommand:
        call = stub.Telemetry(metadata=metadata)
        await call.write(
            spb.TelemetryCommand(
                settings=pb.Settings(
                    client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)])
                )
            )
        )
        reply = await call.read()
        call.cancel()
        return reply

    assert (await settings(OWN, USER)).status.code == pb.OK
    assert (await settings(READ_ONLY, USER)).status.code == pb.UNAUTHORIZED
    assert (await settings(OWN, signed(AK, "wrong_secret"))).status.code == pb.UNAUTHORIZED


async def test_white_address_passes_without_signature(tmp_path):
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(yaml.safe_dump({"globalWhiteRemoteAddresses": ["127.0.0.*"]}))
    async with plaintext_endpoint(
        tmp_path,
        prepare=lambda broker: broker._create_topic_for_route(OWN),
        aclEnable="true",
        rocketmqHome=str(home),
    ) as (_broker, channel):
        sent = await MessagingServiceStub(channel).SendMessage(send_request(OWN), metadata=signed(None, None))
    assert sent.status.code == pb.OK, sent.status


async def test_a_4x_connection_cannot_claim_the_proxy_bypass(acl_endpoint):
    broker, _ = acl_endpoint
    hook = PlainAccessValidator(broker.acl)
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": OWN, "acl_checked_by_proxy": "true"}, b"x")
    refusal = hook(FakeChannel(), request)
    assert refusal is not None and refusal.code == ResponseCode.SYSTEM_ERROR


async def test_an_accounts_white_address_and_hot_reload_apply(acl_endpoint, tmp_path):
    broker, stub = acl_endpoint
    unsigned = signed(None, None)
    assert (await stub.SendMessage(send_request(OWN), metadata=unsigned)).status.code == pb.UNAUTHORIZED
    # an account whose white address is loopback: its calls need no signature (4.9.7 then checks nothing more)
    acl = dict(ACL, accounts=[dict(ACL["accounts"][0], whiteRemoteAddress="127.0.0.1")])
    (tmp_path / "home" / "conf" / "plain_acl.yml").write_text(yaml.safe_dump(acl, sort_keys=False))
    assert broker.acl.reload_if_changed()
    assert (await stub.SendMessage(send_request(OWN), metadata=signed(AK, "any"))).status.code == pb.OK
    assert (await stub.SendMessage(send_request(OWN), metadata=unsigned)).status.code == pb.UNAUTHORIZED


async def test_our_tools_sign_as_the_clients_do(acl_endpoint):
    _, stub = acl_endpoint
    meta = (("x-mq-client-id", "tool"),) + signed_metadata(AK, SK)
    assert (await stub.SendMessage(send_request(OWN), metadata=meta)).status.code == pb.OK
    meta = (("x-mq-client-id", "tool"),) + signed_metadata(AK, "wrong_secret")
    assert (await stub.SendMessage(send_request(OWN), metadata=meta)).status.code == pb.UNAUTHORIZED
