"""MessagingService: the ``apache.rocketmq.v2`` methods 5.x clients call, translated to the broker's own paths.

Sends, heartbeats, end-transactions and dead-letter forwards become the remoting requests a 4.x client
would send and go through the broker's dispatch table (same processors, same bounded queues); receive,
ack and change of invisible duration are served by the broker's PopService; routes and assignments come
from the broker's topic table. Errors the 5.x protocol describes (unknown topic, bad receipt handle...)
are answered in the response's ``Status``, as the clients expect; errors of the call itself (no client
id, a request that cannot be understood) end the call with a gRPC status code and a clear message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.common import CallError, ClientState, ServiceBase, Undecodable
from proxy.consume import ConsumeCalls
from proxy.protocol import service_pb2_grpc
from proxy.route import RouteCalls
from proxy.send import SendCalls
from proxy.session import SessionCalls

if TYPE_CHECKING:
    from broker.controller import BrokerController

__all__ = ["CallError", "ClientState", "MessagingService", "Undecodable"]


class MessagingService(RouteCalls, SessionCalls, SendCalls, ConsumeCalls, service_pb2_grpc.MessagingServiceServicer):
    """The methods, one module per job: route.py, session.py, send.py, consume.py; the plumbing in common.py."""

    def __init__(self, controller: BrokerController) -> None:
        ServiceBase.__init__(self, controller)
