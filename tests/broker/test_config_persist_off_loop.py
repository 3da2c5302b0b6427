"""Topic and group changes made by requests never wait for the disk on the event loop.

A topic auto-created by a first send (or a group by a first heartbeat) used to fsync ``topics.json`` on the loop:
20-30 ms on a quiet machine, long enough on a busy disk for the sends queued behind it to fail with
[TIMEOUT_CLEAN_QUEUE]. The file must still be written (renamed into place) before the request is answered, so
that a killed broker keeps the change, and start and shutdown still sync in place.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import broker.config_file as config_file
from broker.config import BrokerConfig
from broker.config_file import read_config
from broker.subscription_group_manager import SubscriptionGroupManager
from broker.topic import TopicConfig
from broker.topic_config_manager import TopicConfigManager


@pytest.fixture
def fsync_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread of every fsync; each one takes 50 ms, like a busy disk."""
    seen: list[str] = []
    real_fsync = config_file.os.fsync

    def slow_fsync(fd: int) -> None:
        seen.append(threading.current_thread().name)
        threading.Event().wait(0.05)
        real_fsync(fd)

    monkeypatch.setattr(config_file.os, "fsync", slow_fsync)
    return seen


async def _until(predicate, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_topic_created_on_the_loop_is_written_at_once_and_synced_off_it(tmp_path: Path, fsync_threads: list[str]):
    manager = TopicConfigManager(BrokerConfig(store_path_root_dir=str(tmp_path)))
    path = tmp_path / "config" / "topics.json"

    async def scenario() -> None:
        loop_thread = threading.current_thread().name
        began = asyncio.get_running_loop().time()
        manager.update_topic_config(TopicConfig("CreatedByARequest", read_queue_nums=4, write_queue_nums=4))
        took = asyncio.get_running_loop().time() - began
        # on disk (renamed into place) before the request is answered: a killed broker keeps it
        assert "CreatedByARequest" in read_config(path)["topicConfigTable"]
        assert took < 0.05, f"the loop waited {took * 1000:.0f} ms for the disk"
        await _until(lambda: len(fsync_threads) >= 2)  # the file, then its folder (the rename)
        assert loop_thread not in fsync_threads

    asyncio.run(scenario())


def test_a_group_auto_created_on_the_loop_is_synced_off_it(tmp_path: Path, fsync_threads: list[str]):
    manager = SubscriptionGroupManager(str(tmp_path))

    async def scenario() -> None:
        loop_thread = threading.current_thread().name
        assert manager.find_subscription_group_config("GID_first_heartbeat") is not None
        data = read_config(tmp_path / "config" / "subscriptionGroup.json")
        assert "GID_first_heartbeat" in data["subscriptionGroupTable"]
        await _until(lambda: len(fsync_threads) >= 2)
        assert loop_thread not in fsync_threads

    asyncio.run(scenario())


def test_start_and_shutdown_sync_in_place(tmp_path: Path, fsync_threads: list[str]):
    manager = TopicConfigManager(BrokerConfig(store_path_root_dir=str(tmp_path)))

    async def shutdown() -> None:  # the controller's final persist runs on the loop and must be on disk after it
        manager.persist(sync=True)
        assert fsync_threads == [threading.current_thread().name]

    asyncio.run(shutdown())
    fsync_threads.clear()
    manager.persist()  # no loop (a tool): synced in place
    assert fsync_threads == [threading.current_thread().name]
