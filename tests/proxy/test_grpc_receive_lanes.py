"""One receive per assigned queue: QueryAssignment hands out each readable queue (up to 8), and a
ReceiveMessage pops the queue it names first, so a 5.x push consumer keeps several receives in flight
(docs/design.md, "Speed: gRPC path"). An in-process broker with its gRPC endpoint, driven with our stub.
"""

from __future__ import annotations

import uuid

import pytest
from google.protobuf.duration_pb2 import Duration

from broker.topic import PERM_READ, PERM_WRITE, TopicConfig
from proxy.common import MAX_ASSIGNMENTS
from proxy.consume import receive_order
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb
from proxy.protocol.service_pb2_grpc import MessagingServiceStub
from tests.proxy.grpc_endpoint import plaintext_endpoint

META = (("x-mq-client-id", "lanes-client"),)
GROUP = "LanesGroup"


@pytest.fixture
async def endpoint(tmp_path):
    async with plaintext_endpoint(tmp_path) as (broker, channel):
        yield broker, MessagingServiceStub(channel)


def make_topic(broker, name: str, queues: int, perm: int = PERM_READ | PERM_WRITE) -> None:
    broker.topic_config_manager.update_topic_config(
        TopicConfig(name, read_queue_nums=queues, write_queue_nums=queues, perm=perm)
    )


async def assigned_ids(stub, topic: str) -> list[int]:
    response = await stub.QueryAssignment(
        spb.QueryAssignmentRequest(topic=pb.Resource(name=topic), group=pb.Resource(name=GROUP)), metadata=META
    )
    assert response.status.code == pb.OK, response.status
    return [a.message_queue.id for a in response.assignments]


async def test_each_readable_queue_is_an_assignment_up_to_the_cap(endpoint):
    broker, stub = endpoint
    make_topic(broker, "Lanes4", 4)
    make_topic(broker, "Lanes16", 16)
    assert await assigned_ids(stub, "Lanes4") == [0, 1, 2, 3]
    assert await assigned_ids(stub, "Lanes16") == list(range(MAX_ASSIGNMENTS))


async def test_a_topic_that_cannot_be_read_keeps_the_one_whole_broker_assignment(endpoint):
    broker, stub = endpoint
    make_topic(broker, "LanesWriteOnly", 4, perm=PERM_WRITE)
    assert await assigned_ids(stub, "LanesWriteOnly") == [-1]


async def test_a_receive_pops_the_queue_it_names_first(endpoint):
    broker, stub = endpoint
    make_topic(broker, "LanesOrder", 8)
    for _ in range(16):  # the proxy's round robin: two messages in each of the 8 queues
        msg = pb.Message(topic=pb.Resource(name="LanesOrder"), body=b"x")
        msg.system_properties.message_id = uuid.uuid4().hex.upper()
        sent = await stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=META)
        assert sent.status.code == pb.OK
    for queue_id in (5, 2, 7, 0, 5):
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=GROUP),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="LanesOrder"), id=queue_id),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=1,
            invisible_duration=Duration(seconds=30),
            long_polling_timeout=Duration(seconds=1),
        )
        got = [r.message async for r in stub.ReceiveMessage(request, metadata=META) if r.HasField("message")]
        assert [m.system_properties.queue_id for m in got] == [queue_id]


def test_receive_order_names_every_queue_once_the_named_one_first():
    for queue_id in range(8):
        order = receive_order(queue_id, 8)
        assert order[0] == queue_id and sorted(order) == list(range(8))
    for unknown in (-1, 8, 99):
        assert sorted(receive_order(unknown, 8)) == list(range(8))
    assert receive_order(-1, 0) == []
