"""GrpcServer: the 5.x endpoint's listener (grpc.aio), TLS or plaintext, started and stopped by the broker.

A port already taken is reported in one warning line and the broker runs on without the endpoint: the
4.x remoting port is the one the broker cannot live without, and the default 8081 is often taken on a
developer's machine (or by a second broker in one test run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
import structlog

from proxy.protocol import service_pb2_grpc
from proxy.service import MessagingService
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
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                          ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                          ("grpc.so_reuseport", 0)])
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, server)
        address = f"{c.grpc_listen_host}:{c.grpc_server_port}"
        try:
            if c.grpc_tls_enable:
                tls = load_or_generate(c.grpc_tls_cert_path, c.grpc_tls_key_path, c.store_path_root_dir,
                                       ["localhost", "127.0.0.1", c.broker_ip1])
                self.cert_path = str(tls.cert_path)
                port = server.add_secure_port(address, grpc.ssl_server_credentials([(tls.key_pem, tls.cert_pem)]))
            else:
                port = server.add_insecure_port(address)
        except (RuntimeError, OSError, ValueError) as exc:
            log.warning("the gRPC endpoint is not started", address=address, error=str(exc))
            return
        await server.start()
        self._server, self.port = server, port
        log.info("gRPC endpoint listening", address=f"{c.grpc_listen_host}:{port}",
                 tls=c.grpc_tls_enable, cert=self.cert_path)

    async def stop(self, grace_s: float) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
