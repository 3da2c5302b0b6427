"""A small real store with one delivery service on it (the delay-level schedule or the timer wheel), for their tests.

``StoreRig`` opens the store on a directory, builds the service (``make_service``), wires the store's arrival
listener to it and starts both; ``restart`` reopens both on the same directory, as a broker restart does.
``messages`` reads a queue back from the start; ``wait_for`` polls until a queue holds ``n`` messages.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Self

from store import GetMessageStatus, MessageStore, MessageStoreConfig, decode_records


class StoreRig:
    def __init__(self, root, **store_config: Any) -> None:
        self.root = root
        self.store_config = store_config
        self.store: MessageStore | None = None
        self.service: Any = None

    def make_service(self, store: MessageStore) -> Any:
        raise NotImplementedError

    def on_arrival(self, topic: str, queue_id: int) -> None:
        """The store's message_arriving_listener: wake the service when its own topic grows."""
        raise NotImplementedError

    async def open(self) -> Self:
        self.store = MessageStore(
            MessageStoreConfig(
                store_path_root_dir=str(self.root),
                **{
                    "mapped_file_size_commit_log": 256 * 1024,
                    "mapped_file_size_consume_queue": 1000 * 20,
                    "max_hash_slot_num": 64,
                    "max_index_num": 256,
                    **self.store_config,  # a test's own settings win
                },
            )
        )
        assert await self.store.load()
        await self.store.start()
        self.service = self.make_service(self.store)
        self.store.message_arriving_listener = lambda topic, queue_id, *_: self.on_arrival(topic, queue_id)
        self.service.load()
        self.service.start()
        return self

    async def close(self) -> None:
        await self.service.stop()
        await self.store.shutdown()

    async def restart(self) -> None:
        await self.close()
        await self.open()

    def messages(self, topic: str, queue_id: int = 0, flt=None) -> list:
        assert self.store is not None
        out, offset = [], 0
        while True:
            r = self.store.get_message("g", topic, queue_id, offset, 32, flt)
            if r.status != GetMessageStatus.FOUND:
                return out
            out += decode_records(b"".join(r.buffers))
            offset = r.next_begin_offset

    def bodies(self, topic: str, queue_id: int = 0) -> list[str]:
        return [m.body.decode() for m in self.messages(topic, queue_id)]

    async def wait_for(self, topic: str, n: int, timeout_s: float = 5.0, queue_id: int = 0) -> list:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.messages(topic, queue_id)
            if len(got) >= n:
                return got
            await asyncio.sleep(0.005)
        raise AssertionError(f"{topic} has {len(self.messages(topic, queue_id))} messages, expected {n}")


@asynccontextmanager
async def opened(rig: StoreRig) -> AsyncIterator[StoreRig]:
    """The rig, open; closed afterwards unless the test already closed it."""
    await rig.open()
    try:
        yield rig
    finally:
        if rig.store is not None and rig.store._running:
            await rig.close()
