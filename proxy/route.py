"""QueryRoute and QueryAssignment: the topic table as 5.x clients see it."""

from __future__ import annotations

from broker.topic import is_readable, is_writeable
from proxy.common import (
    MAX_ASSIGNMENTS,
    OK,
    ServiceBase,
    status,
    topic_message_types,
)
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb


class RouteCalls(ServiceBase):
    """QueryRoute / QueryAssignment."""

    # -- QueryRoute / QueryAssignment -------------------------------------------------------------------
    def _broker(self, endpoints: pb.Endpoints) -> pb.Broker:
        broker = pb.Broker(name=self.config.broker_name, id=0)
        if endpoints.addresses:
            broker.endpoints.CopyFrom(endpoints)
        else:
            broker.endpoints.scheme = pb.IPv4
            broker.endpoints.addresses.add(host=self.config.broker_ip1, port=self.config.grpc_server_port)
        return broker

    async def QueryRoute(self, request: spb.QueryRouteRequest, context) -> spb.QueryRouteResponse:
        return await self._guard(context, self._query_route, request, spb.QueryRouteResponse)

    async def _query_route(self, request, context) -> spb.QueryRouteResponse:
        self._client(context)
        tc = self._topic(request.topic, create=True)
        if tc is None:
            return spb.QueryRouteResponse(
                status=status(pb.TOPIC_NOT_FOUND, f"topic {request.topic.name} does not exist")
            )
        broker = self._broker(request.endpoints)
        kinds = topic_message_types(tc)
        response = spb.QueryRouteResponse(status=OK)
        for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
            readable = qid < tc.read_queue_nums and is_readable(tc.perm)
            writeable = qid < tc.write_queue_nums and is_writeable(tc.perm)
            perm = {(True, True): pb.READ_WRITE, (True, False): pb.READ, (False, True): pb.WRITE}.get(
                (readable, writeable), pb.NONE
            )
            response.message_queues.add(
                topic=request.topic, id=qid, permission=perm, broker=broker, accept_message_types=kinds
            )
        return response

    async def QueryAssignment(self, request, context) -> spb.QueryAssignmentResponse:
        return await self._guard(context, self._query_assignment, request, spb.QueryAssignmentResponse)

    async def _query_assignment(self, request, context) -> spb.QueryAssignmentResponse:
        self._client(context)
        tc = self._topic(request.topic)
        if tc is None:
            return spb.QueryAssignmentResponse(
                status=status(pb.TOPIC_NOT_FOUND, f"topic {request.topic.name} does not exist")
            )
        if self._group_config(request.group.name) is None:
            return spb.QueryAssignmentResponse(
                status=status(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {request.group.name} does not exist")
            )
        # POP: every consumer of the group is given the same queues. A 5.x push consumer keeps one
        # ReceiveMessage in flight per assigned queue, and each receive is a stream of one response per
        # message that grpc.aio writes one event-loop turn at a time: a single assignment (upstream's one
        # per broker, queue id -1) caps a consumer at one batch per ~34 loop turns, which a busy broker
        # serves more slowly than its producers' sends (docs/design.md, "Speed: gRPC path"). So each
        # readable queue, up to MAX_ASSIGNMENTS, is an assignment; a receive pops its own queue first.
        response = spb.QueryAssignmentResponse(status=OK)
        broker = self._broker(request.endpoints)
        kinds = topic_message_types(tc)
        for qid in range(min(tc.read_queue_nums, MAX_ASSIGNMENTS)) if is_readable(tc.perm) else ():
            response.assignments.add().message_queue.CopyFrom(
                pb.MessageQueue(
                    topic=request.topic, id=qid, permission=pb.READ_WRITE, broker=broker, accept_message_types=kinds
                )
            )
        if not response.assignments:  # nothing readable: one assignment of the whole broker, as before
            response.assignments.add().message_queue.CopyFrom(
                pb.MessageQueue(
                    topic=request.topic, id=-1, permission=pb.READ_WRITE, broker=broker, accept_message_types=kinds
                )
            )
        return response
