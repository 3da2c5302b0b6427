"""``NullTransport``: a connection's transport with no socket, for driving ``RemotingProtocol`` in process.

The in-process cost benchmarks (``send_path_cost --wire``, ``connection_cost``) and the frame-split tests feed a
real ``RemotingProtocol`` bytes by hand; they need only what the protocol and its ``Channel`` ask of an asyncio
transport. Imported at the top of benchmarks that run other checkouts, so it uses nothing of ``remoting``.
"""

from __future__ import annotations


class NullTransport:
    """What ``RemotingProtocol`` and ``Channel`` use of a transport. ``writes`` counts the buffers written;
    with ``keep``, ``chunks`` holds each ``writelines`` call's bytes joined. ``close`` marks it closing."""

    def __init__(self, *, keep: bool = False) -> None:
        self.writes = 0
        self.keep = keep
        self.chunks: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 40000) if name in ("peername", "sockname") else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closed

    def writelines(self, data) -> None:  # noqa: ANN001
        self.writes += len(data)
        if self.keep:
            self.chunks.append(b"".join(data))

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
