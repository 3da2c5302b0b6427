"""Fixtures of the store tests (helpers live in store_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from store_helpers import small_config

from store import MessageStore, MessageStoreConfig


@pytest.fixture
def config_factory(tmp_path) -> Callable[..., MessageStoreConfig]:
    def factory(**overrides) -> MessageStoreConfig:
        return small_config(tmp_path / "store", **overrides)

    return factory


@pytest.fixture
async def store_factory(config_factory):
    """Open stores (loaded and started); the test may shut them down, leftovers are shut down."""
    opened: list[MessageStore] = []

    async def factory(config: MessageStoreConfig | None = None, **kw) -> MessageStore:
        cfg = config or config_factory()
        s = MessageStore(cfg, **kw)
        assert await s.load()
        await s.start()
        opened.append(s)
        return s

    yield factory
    for s in opened:
        if s._running:
            await s.shutdown()
