"""QueryRoute and QueryAssignment: the topic table as 5.x clients see it."""

from __future__ import annotations

from broker.topic import is_readable, is_writeable
from proxy.common import (
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
        # POP: the broker serves the whole topic; queue id -1 means "any queue of this broker".
        response = spb.QueryAssignmentResponse(status=OK)
        response.assignments.add().message_queue.CopyFrom(
            pb.MessageQueue(
                topic=request.topic,
                id=-1,
                permission=pb.READ_WRITE,
                broker=self._broker(request.endpoints),
                accept_message_types=topic_message_types(tc),
            )
        )
        return response
