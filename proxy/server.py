"""GrpcServer: the 5.x endpoint's listener (grpc.aio), TLS or plaintext, started and stopped by the broker.

A port already taken is reported in one warning line and the broker runs on without the endpoint: the
4.x remoting port is the one the broker cannot live without, and the default 8081 is often taken on a
developer's machine (or by a second broker in one test run).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
import structlog
from google.protobuf.message import DecodeError

from proxy.protocol import service_pb2 as spb
from proxy.service import MessagingService, Undecodable
from proxy.tls import load_or_generate

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class GrpcServer:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller
        self.config = controller.config
        self.service = MessagingService(controller)
        self._server: grpc.aio.Server | None = None
        self.port: int | None = None
        self.cert_path: str | None = None

    @property
    def enabled(self) -> bool:
        return self.config.grpc_server_port >= 0

    async def start(self) -> None:
        if not self.enabled:
            return
        c = self.config
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ]
        )
        server.add_generic_rpc_handlers((messaging_handlers(self.service),))
        address = f"{c.grpc_listen_host}:{c.grpc_server_port}"
        try:
            if c.grpc_tls_enable:
                tls = load_or_generate(
                    c.grpc_tls_cert_path,
                    c.grpc_tls_key_path,
                    c.store_path_root_dir,
                    ["localhost", "127.0.0.1", c.broker_ip1],
                )
                self.cert_path = str(tls.cert_path)
                port = server.add_secure_port(address, grpc.ssl_server_credentials([(tls.key_pem, tls.cert_pem)]))
            else:
                port = server.add_insecure_port(address)
        except (RuntimeError, OSError, ValueError) as exc:
            log.warning("the gRPC endpoint is not started", address=address, error=str(exc))
            return
        await server.start()
        self._server, self.port = server, port
        log.info(
            "gRPC endpoint listening",
            address=f"{c.grpc_listen_host}:{port}",
            tls=c.grpc_tls_enable,
            cert=self.cert_path,
        )

    async def stop(self, grace_s: float) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None


SERVICE_NAME = "apache.rocketmq.v2.MessagingService"


def _decoder(cls: Any) -> Callable[[bytes], Any]:
    """``cls.FromString`` that returns an ``Undecodable`` instead of raising: grpcio would answer UNKNOWN
    and log a traceback; the method answers INVALID_ARGUMENT with the reason instead."""

    def decode(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError, RuntimeError) as exc:
            return Undecodable(cls.DESCRIPTOR.name, str(exc) or "wire format is corrupt")

    return decode


def messaging_handlers(service: MessagingService) -> grpc.GenericRpcHandler:
    """The MessagingService methods our service implements, from the service descriptor (the generated
    registration helper would register every method with decoders that raise)."""
    handlers = {}
    for method in spb.DESCRIPTOR.services_by_name["MessagingService"].methods:
        request_cls = getattr(spb, method.input_type.name)
        response_cls = getattr(spb, method.output_type.name)
        impl = getattr(service, method.name)
        kwargs = {"request_deserializer": _decoder(request_cls), "response_serializer": response_cls.SerializeToString}
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(impl, **kwargs)
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(_checked_stream(impl), **kwargs)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(_checked_unary(impl), **kwargs)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


async def _refuse(request: Undecodable, context: grpc.aio.ServicerContext) -> None:
    log.warning(
        "grpc request cannot be decoded", message_type=request.message_type, error=request.error, peer=context.peer()
    )
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid {request.message_type}: {request.error}"
    )


def _checked_unary(impl: Callable[..., Any]) -> Callable[..., Any]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            await _refuse(request, context)
        return await impl(request, context)

    return call


def _checked_stream(impl: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if isinstance(request, Undecodable):
            await _refuse(request, context)
        async for response in impl(request, context):
            yield response

    return call
