"""ClientChannelInfo: what the broker knows about one client connection in a group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class ClientChannelInfo:
    channel: Any  # remoting.server.Channel
    client_id: str
    language: str
    version: int
    last_update_ms: int

    def to_connection_json(self) -> dict[str, Any]:
        return {
            "clientAddr": self.channel.remote_addr,
            "clientId": self.client_id,
            "language": self.language,
            "version": self.version,
        }
