"""Bad input on the gRPC endpoint: gRPC status codes or 5.x Status codes with clear messages, never a crash.

An in-process broker with its gRPC endpoint (plaintext) on a free port, driven with our generated stub
and with raw bytes.
"""

from __future__ import annotations

import asyncio
import socket

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.config import build_config
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb
from proxy.protocol.service_pb2_grpc import MessagingServiceStub
from proxy.server import GrpcServer
from tests.broker.broker_helpers import start_broker
from tests.proxy.grpc_endpoint import plaintext_endpoint

META = (("x-mq-client-id", "test-client"),)
TOPIC = "GrpcBadInput"


@pytest.fixture
async def endpoint(tmp_path):
    async with plaintext_endpoint(tmp_path) as (broker, channel):
        yield broker, channel, MessagingServiceStub(channel)


def message(body=b"x", **system) -> pb.Message:
    msg = pb.Message(topic=pb.Resource(name=TOPIC), body=body)
    msg.system_properties.message_id = system.pop("message_id", "0102FC00000001000000000000000001")
    msg.system_properties.message_type = pb.NORMAL
    for key, value in system.items():
        setattr(msg.system_properties, key, value)
    return msg


async def test_a_call_without_client_id_is_refused_with_invalid_argument(endpoint):
    _, _, stub = endpoint
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "x-mq-client-id" in err.value.details()


@pytest.mark.parametrize(
    "method",
    [
        "QueryRoute",
        "Heartbeat",
        "SendMessage",
        "QueryAssignment",
        "AckMessage",
        "ChangeInvisibleDuration",
        "EndTransaction",
        "NotifyClientTermination",
        "ForwardMessageToDeadLetterQueue",
    ],
)
async def test_undecodable_request_gets_invalid_argument_and_the_server_keeps_serving(endpoint, method):
    _, channel, stub = endpoint
    raw = channel.unary_unary(f"/apache.rocketmq.v2.MessagingService/{method}")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await raw(b"\xff\xff\xff\xff\x0f", metadata=META)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "is not a valid" in err.value.details() and "Request" in err.value.details()
    route = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), metadata=META)
    assert route.status.code == pb.OK


async def test_undecodable_receive_request_gets_invalid_argument(endpoint):
    _, channel, _ = endpoint
    raw = channel.unary_stream("/apache.rocketmq.v2.MessagingService/ReceiveMessage")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in raw(b"\xff\xff\xff", metadata=META):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_unknown_method_is_unimplemented(endpoint):
    _, channel, _ = endpoint
    raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/RecallMessage")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await raw(b"", metadata=META)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_telemetry_answers_a_corrupt_command_with_bad_request_and_stays_open(endpoint):
    _, channel, _ = endpoint
    raw = channel.stream_stream("/apache.rocketmq.v2.MessagingService/Telemetry")
    settings_cmd = spb.TelemetryCommand(
        settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=TOPIC)]))
    )
    call = raw(metadata=META)
    await call.write(b"\xff\xff\xff")
    first = spb.TelemetryCommand.FromString(await call.read())
    assert first.status.code == pb.BAD_REQUEST and "TelemetryCommand" in first.status.message
    await call.write(settings_cmd.SerializeToString())
    second = spb.TelemetryCommand.FromString(await call.read())
    assert second.status.code == pb.OK and second.settings.publishing.max_body_size > 0
    await call.done_writing()


async def test_illegal_and_unknown_topics(endpoint):
    _, _, stub = endpoint
    bad = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="bad topic!")), metadata=META)
    assert bad.status.code == pb.ILLEGAL_TOPIC and "illegal characters" in bad.status.message
    missing = await stub.QueryAssignment(
        spb.QueryAssignmentRequest(topic=pb.Resource(name="NoSuchTopic"), group=pb.Resource(name="G")), metadata=META
    )
    assert missing.status.code == pb.TOPIC_NOT_FOUND


async def test_send_refusals_name_the_problem(endpoint):
    _, _, stub = endpoint
    cases = [
        (message(body=b""), pb.MESSAGE_BODY_EMPTY),
        (message(message_id=""), pb.ILLEGAL_MESSAGE_ID),
        (message(tag="a|b"), pb.ILLEGAL_MESSAGE_TAG),
        (message(message_type=pb.FIFO, message_group="g"), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    ]
    reserved = message()
    reserved.user_properties["UNIQ_KEY"] = "mine"
    cases.append((reserved, pb.ILLEGAL_MESSAGE_PROPERTY_KEY))
    for msg, code in cases:
        response = await stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=META)
        assert response.status.code == code, (msg, response)
        assert response.status.message
    empty = await stub.SendMessage(spb.SendMessageRequest(), metadata=META)
    assert empty.status.code == pb.BAD_REQUEST


async def test_consumer_side_refusals(endpoint):
    _, _, stub = endpoint
    sent = await stub.SendMessage(spb.SendMessageRequest(messages=[message()]), metadata=META)
    assert sent.status.code == pb.OK
    queue = pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0)

    async def receive(**kw) -> list[spb.ReceiveMessageResponse]:
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name="G"),
            message_queue=queue,
            batch_size=1,
            long_polling_timeout=Duration(seconds=0),
            **kw,
        )
        return [r async for r in stub.ReceiveMessage(request, metadata=META)]

    (r,) = await receive(invisible_duration=Duration(seconds=0))
    assert r.status.code == pb.ILLEGAL_INVISIBLE_TIME
    (r,) = await receive(filter_expression=pb.FilterExpression(type=pb.SQL, expression="a > 1"))
    assert r.status.code == pb.ILLEGAL_FILTER_EXPRESSION
    ack = await stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="G"),
            topic=pb.Resource(name=TOPIC),
            entries=[spb.AckMessageEntry(receipt_handle="forged")],
        ),
        metadata=META,
    )
    assert ack.status.code == pb.INVALID_RECEIPT_HANDLE and "not issued by this broker" in ack.status.message
    change = await stub.ChangeInvisibleDuration(
        spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="G"),
            topic=pb.Resource(name=TOPIC),
            receipt_handle="p1 0 0 1 1",
            invisible_duration=Duration(seconds=5),
        ),
        metadata=META,
    )
    assert change.status.code == pb.INVALID_RECEIPT_HANDLE
    end = await stub.EndTransaction(
        spb.EndTransactionRequest(topic=pb.Resource(name=TOPIC), transaction_id="x", resolution=pb.COMMIT),
        metadata=META,
    )
    assert end.status.code == pb.INVALID_TRANSACTION_ID


async def test_forward_to_dead_letter_queue_moves_the_message_and_consumes_it(endpoint):
    broker, _, stub = endpoint
    await stub.SendMessage(spb.SendMessageRequest(messages=[message(b"to-the-dlq")]), metadata=META)
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="G"),
        batch_size=1,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0),
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=2),
    )
    responses = [r async for r in stub.ReceiveMessage(request, metadata=META)]
    (got,) = [r.message for r in responses if r.HasField("message")]
    handle = got.system_properties.receipt_handle
    forward = await stub.ForwardMessageToDeadLetterQueue(
        spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name="G"),
            topic=pb.Resource(name=TOPIC),
            receipt_handle=handle,
            message_id=got.system_properties.message_id,
            delivery_attempt=1,
            max_delivery_attempts=1,
        ),
        metadata=META,
    )
    assert forward.status.code == pb.OK, forward
    assert broker.store.get_max_offset_in_queue("%DLQ%G", 0) == 1
    again = await stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="G"),
            topic=pb.Resource(name=TOPIC),
            entries=[spb.AckMessageEntry(receipt_handle=handle)],
        ),
        metadata=META,
    )
    assert again.status.code == pb.INVALID_RECEIPT_HANDLE


METHODS = [
    "QueryRoute",
    "Heartbeat",
    "SendMessage",
    "QueryAssignment",
    "AckMessage",
    "ChangeInvisibleDuration",
    "EndTransaction",
    "ForwardMessageToDeadLetterQueue",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(METHODS), data=st.binary(max_size=200))
async def test_random_bytes_never_produce_an_internal_error(endpoint, method, data):
    _, channel, _ = endpoint
    raw = channel.unary_unary(f"/apache.rocketmq.v2.MessagingService/{method}")
    try:
        await asyncio.wait_for(raw(data, metadata=META), 10)
    except grpc.aio.AioRpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, data, err.code(), err.details())


async def test_grpc_endpoint_defaults_and_a_taken_port_leaves_the_broker_running(tmp_path):
    config, _ = build_config([])
    assert (config.grpc_server_port, config.grpc_tls_enable) == (8081, True)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = await start_broker(tmp_path, grpcServerPort=port, grpcTlsEnable="false", grpcListenHost="127.0.0.1")
        try:
            server = GrpcServer(broker)
            await server.start()
            assert server.port is None  # one warning line, no endpoint, no exception
        finally:
            await broker.shutdown()
