"""Exception types raised by the remoting layer (codec, frames, headers, client/server transport)."""

from __future__ import annotations


class RemotingError(Exception):
    """Base of every remoting failure."""


class FrameError(RemotingError):
    """The length prefix of a frame is impossible (≤ 0 or above the limit): the stream is unusable."""


class FrameTooLargeError(FrameError):
    """The length prefix announces more than ``frame_max`` bytes."""


class RemotingCommandError(RemotingError):
    """A frame could not be decoded into a command (or a command could not be encoded).

    ``opaque``/``flag`` are set when the header was readable far enough to know them, so the
    connection can answer the request instead of dropping it.
    """

    def __init__(self, message: str, *, opaque: int | None = None, flag: int = 0, serialize_type: int = 0) -> None:
        super().__init__(message)
        self.opaque = opaque
        self.flag = flag
        self.serialize_type = serialize_type


class HeaderError(RemotingError):
    """A custom header (extFields) lacks a required field or carries an ill-typed value."""


class RemotingConnectError(RemotingError):
    """The peer could not be reached, or the connection went away before the answer came."""


class RemotingTimeoutError(RemotingError):
    """No response arrived within the invoke timeout."""


class RemotingSendRequestError(RemotingConnectError):
    """The request could not be written because the channel is already closed."""
