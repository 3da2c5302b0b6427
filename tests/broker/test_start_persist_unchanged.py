"""A restart does not rewrite config files that did not change: no temporary file, ``.bak`` copy, rename or fsync
on the start's path (``broker.config_file.write_if_changed``).

A start persisted ``topics.json``, ``delayOffset.json`` and ``timerOffset.json`` with an fsync each although a
restart finds them as it left them: ~1 ms apiece on a quiet disk, tens of ms on a busy one, waited for before the
ports open. A file whose content differs is still written and fsynced before the start goes on; an unchanged one
is still made durable (``fdatasync``: a previous process may have died before its own sync), in a worker thread
when a loop runs: even a clean file's sync waits for the disk's cache flush.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import broker.config_file as config_file
from broker.config_file import write_if_changed
from broker.testing.process import BrokerProcess

START_PERSISTED = ("topics.json", "delayOffset.json", "timerOffset.json", "subscriptionGroup.json")


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """ "fsync" or "fdatasync" for every sync ``config_file`` makes, in order."""
    seen: list[str] = []
    real_fsync, real_fdatasync = config_file.os.fsync, config_file.os.fdatasync

    def fsync(fd: int) -> None:
        seen.append("fsync")
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        seen.append("fdatasync")
        real_fdatasync(fd)

    monkeypatch.setattr(config_file.os, "fsync", fsync)
    monkeypatch.setattr(config_file.os, "fdatasync", fdatasync)
    return seen


def test_a_new_file_is_written_and_fsynced(tmp_path: Path, syncs: list[str]):
    path = tmp_path / "config" / "topics.json"
    assert write_if_changed(path, b'{"a": 1}')
    assert path.read_bytes() == b'{"a": 1}'
    assert syncs == ["fsync"]


def test_an_unchanged_file_is_only_synced_not_rewritten(tmp_path: Path, syncs: list[str]):
    path = tmp_path / "topics.json"
    write_if_changed(path, b'{"a": 1}')
    inode = path.stat().st_ino
    syncs.clear()
    assert not write_if_changed(path, b'{"a": 1}')
    assert path.stat().st_ino == inode  # not replaced by a rename
    assert not path.with_name("topics.json.bak").exists()
    assert syncs == ["fdatasync"]  # no loop (a tool): in place
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_an_unchanged_file_is_synced_off_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "topics.json"
    write_if_changed(path, b'{"a": 1}')
    threads: list[str] = []
    synced = threading.Event()
    real_fdatasync = config_file.os.fdatasync

    def fdatasync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        real_fdatasync(fd)
        synced.set()

    monkeypatch.setattr(config_file.os, "fdatasync", fdatasync)

    async def start() -> str:
        assert not write_if_changed(path, b'{"a": 1}')
        await asyncio.get_running_loop().run_in_executor(None, synced.wait, 5.0)
        return threading.current_thread().name

    loop_thread = asyncio.run(start())
    assert len(threads) == 1 and threads[0] != loop_thread


@pytest.mark.parametrize("payload", [b'{"a": 2}', b'{"a": 1} ', b""], ids=["same-size", "longer", "empty"])
def test_a_changed_file_is_rewritten_with_fsync_and_a_backup(tmp_path: Path, syncs: list[str], payload: bytes):
    path = tmp_path / "topics.json"
    write_if_changed(path, b'{"a": 1}')
    syncs.clear()
    assert write_if_changed(path, payload)
    assert path.read_bytes() == payload
    assert path.with_name("topics.json.bak").read_bytes() == b'{"a": 1}'
    assert syncs == ["fsync"]


def test_a_restart_leaves_the_config_files_it_did_not_change_in_place(tmp_path: Path):
    store = tmp_path / "store"
    broker = BrokerProcess(store, config={"mappedFileSizeCommitLog": 4 * 1024 * 1024}, grpc_port=0)
    broker.start()
    broker.stop(check=True)
    config = store / "config"
    before = {name: (config / name).stat() for name in START_PERSISTED}
    broker.start()
    try:
        after = {name: (config / name).stat() for name in START_PERSISTED}
        for name in START_PERSISTED:  # a rewrite renames a new inode into place
            assert (after[name].st_ino, after[name].st_mtime_ns) == (before[name].st_ino, before[name].st_mtime_ns), (
                f"{name} was rewritten by a start that changed nothing in it"
            )
        assert not list(config.glob("*.tmp"))
    finally:
        broker.stop(check=True)
    for name in START_PERSISTED:  # nor by the shutdown
        assert (config / name).stat().st_ino == before[name].st_ino, name
