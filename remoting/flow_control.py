"""Per-connection read back-pressure: pause reading from a peer while it cannot keep up (uvicorn style).

Two reasons pause reading, and reading resumes only when neither holds:
* the transport's write buffer is above its high-water mark (``pause_writing``/``resume_writing``
  callbacks of ``asyncio.Protocol``): the peer does not read our responses, so we stop reading
  its requests instead of buffering their answers without bound;
* too many of the peer's requests are queued or running (``set_busy``): requests already read
  would otherwise keep producing responses after the write buffer filled up.
"""

from __future__ import annotations

import asyncio


class FlowControl:
    __slots__ = ("_transport", "busy", "read_paused", "write_paused")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.write_paused = False
        self.busy = False
        self.read_paused = False

    def pause_writing(self) -> None:
        self.write_paused = True
        self._update()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._update()

    def set_busy(self, busy: bool) -> None:
        if busy != self.busy:
            self.busy = busy
            self._update()

    def _update(self) -> None:
        should_pause = self.write_paused or self.busy
        if should_pause == self.read_paused:
            return
        self.read_paused = should_pause
        if self._transport.is_closing():
            return
        try:
            if should_pause:
                self._transport.pause_reading()
            else:
                self._transport.resume_reading()
        except RuntimeError:  # transport closed between the check and the call
            pass
