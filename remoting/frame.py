"""``FrameDecoder``: a byte stream in, complete length-prefixed frames out (as memoryviews), with length checks.

Each frame is ``int32 length | length bytes``; a yielded frame is the ``length`` bytes after the prefix.
Reads may split a frame or carry many; the decoder keeps a read index into one buffer and never
re-copies consumed bytes, so cost stays linear in the bytes received.

Lifetime rule: a yielded memoryview is valid until the next ``append``/``feed`` call (consumers
copy what they keep — ``RemotingCommand.decode`` copies the body). Views kept longer stay
readable: the decoder then abandons the buffer instead of resizing it under them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from remoting.errors import FrameError, FrameTooLargeError

# J NettyDecoder: com.rocketmq.remoting.frameMaxLength default.
DEFAULT_FRAME_MAX = 16 * 1024 * 1024

_LEN = struct.Struct(">i")
#: a frame's length word at an offset (``RemotingProtocol._process`` splits frames itself)
unpack_length = _LEN.unpack_from
# Compact the buffer once this many consumed bytes sit in front of the read index.
_COMPACT_AT = 256 * 1024


class FrameDecoder:
    """The buffer and read index are ``buf`` and ``pos``: ``RemotingProtocol._process`` reads frames out of them
    itself (``next_frame``'s checks, unrolled there) and moves ``pos`` past each, or calls ``release`` once all
    is consumed; everyone else uses ``next_frame``/``feed``."""

    __slots__ = ("buf", "max_frame", "pos")

    def __init__(self, max_frame: int = DEFAULT_FRAME_MAX) -> None:
        self.max_frame = max_frame
        # bytes when a whole received chunk is being parsed in place (no copy); bytearray once
        # a partial frame has to be kept across reads.
        self.buf: bytes | bytearray = b""
        self.pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self.buf) - self.pos

    def append(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        buf = self.buf
        if self.pos >= len(buf):
            # Nothing pending: parse the new chunk where it lies. Copy only if it is mutable.
            self.buf = data if type(data) is bytes else bytes(data)
            self.pos = 0
            return
        if type(buf) is bytes:
            # A partial frame left over from an in-place chunk: now we need a growable buffer.
            self.buf = bytearray(memoryview(buf)[self.pos :])
            self.pos = 0
            self.buf += data
            return
        try:
            if self.pos >= _COMPACT_AT or self.pos * 2 >= len(buf):
                del buf[: self.pos]  # CPython removes a bytearray prefix without moving the tail
                self.pos = 0
            buf += data
        except BufferError:
            # Someone still holds a view of a returned frame: leave them the old buffer.
            fresh = bytearray(memoryview(buf)[self.pos :])
            fresh += data
            self.buf = fresh
            self.pos = 0

    def next_frame(self) -> memoryview | None:
        """The next complete frame, or None if more bytes are needed. Raises FrameError."""
        buf = self.buf
        pos = self.pos
        avail = len(buf) - pos
        if avail < 4:
            return None
        (length,) = _LEN.unpack_from(buf, pos)
        if length <= 0:
            raise FrameError(f"invalid frame length {length} (must be positive)")
        if length > self.max_frame:
            raise FrameTooLargeError(f"frame length {length} exceeds the maximum {self.max_frame}")
        if avail - 4 < length:
            return None
        start = pos + 4
        end = start + length
        frame = memoryview(buf)[start:end]
        if end == len(buf):
            # Everything consumed: drop our reference to the chunk, or an idle connection would keep its last
            # (possibly megabytes-large) read alive. The returned view keeps what it needs.
            self.buf = b""
            self.pos = 0
        else:
            self.pos = end
        return frame

    def release(self) -> None:
        """Everything buffered was consumed: drop the chunk (see ``next_frame``)."""
        self.buf = b""
        self.pos = 0

    def clear(self) -> None:
        """Forget buffered bytes (the connection is gone): a partial frame must not outlive it."""
        self.buf = b""
        self.pos = 0

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[memoryview]:
        """Append ``data`` and yield every complete frame (iterate it to the end)."""
        self.append(data)
        while (frame := self.next_frame()) is not None:
            yield frame
