"""Crash-safe JSON config files (topics.json, consumerOffset.json, ...), as upstream's ConfigManager.

A write goes to ``<file>.tmp``, the old file is copied to ``<file>.bak``, then the tmp file is renamed
over it; a load falls back to ``.bak`` when the main file is missing or unreadable. Files written by a
Java broker use fastjson's unquoted integer keys (``{0:12}``), so loading quotes those first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import structlog

log = structlog.get_logger(__name__)

_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def loads_lenient(data: bytes | str) -> Any:
    """Parse JSON, accepting fastjson's unquoted integer map keys."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return orjson.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))


def write_atomically(path: str | os.PathLike, payload: bytes, *, fsync: bool = True) -> None:
    """Write ``payload`` to a temporary file of its own beside ``path`` and rename it over ``path``.

    The temporary name is unique per write: two writers of one file (a periodic persist in a thread and the
    final one at shutdown) must never rename each other's half-written file away. ``fsync=False`` leaves the
    data in the page cache (``write_from_loop`` syncs it from a worker thread)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with open(fd, "wb") as fh:
            fh.write(payload)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        if path.exists():
            shutil.copyfile(path, path.with_name(path.name + ".bak"))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_if_changed(path: str | os.PathLike, payload: bytes) -> bool:
    """``write_atomically`` with its fsync, unless ``path`` already holds exactly ``payload``; True if written.

    Start and shutdown persist files that usually did not change since they were read (the topics, the delay
    and timer offsets). Rewriting them cost a temporary file, a ``.bak`` copy, a rename and an fsync each: on a
    restart ~1 ms apiece on a quiet disk, tens of ms on a busy one, all before the ports open. Bytes equal to
    the payload are left in place and synced (``fdatasync``) in a worker thread when a loop runs, else here: a
    previous process may have renamed them into place and died before its own sync (``write_from_loop``), and
    even a clean file's sync waits for the disk to flush its cache (ext4 issues the flush regardless)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # missing (a fresh store) or unreadable: the rewrite replaces it
        write_atomically(path, payload)
        return True
    try:
        same = os.fstat(fd).st_size == len(payload) and _read_all(fd, len(payload)) == payload
    except OSError:
        same = False
    finally:
        os.close(fd)
    if not same:
        write_atomically(path, payload)
        return True
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        sync_data(path)
        return False
    try:
        loop.run_in_executor(None, sync_data, path)
    except RuntimeError:  # the loop's executor is shut down: the loop is closing, sync here
        sync_data(path)
    return False


def _read_all(fd: int, size: int) -> bytes:
    chunks = []
    while size > 0 and (chunk := os.read(fd, size)):
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def sync_data(path: Path) -> None:
    """fdatasync ``path``: its bytes, not the access time that reading it just changed."""
    _sync((path,), os.fdatasync)


def write_from_loop(path: str | os.PathLike, payload: bytes) -> None:
    """``write_atomically`` for state a request changed on the event loop (a topic or a group created).

    The file is written and renamed now, so the change outlives a killed process the moment the request is
    answered, as upstream's ``ConfigManager.persist`` (which never syncs) does. Its fsync, which on a busy
    disk takes tens to hundreds of milliseconds, runs in a worker thread: on the loop it held every other
    request back (a topic auto-created by a first send stalled the loop 20-30 ms on a quiet machine, and the
    sends queued behind it on a loaded one failed with [TIMEOUT_CLEAN_QUEUE]). Without a running loop
    (start, shutdown, tools) the write is synced in place."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        write_atomically(path, payload)
        return
    write_atomically(path, payload, fsync=False)
    try:
        loop.run_in_executor(None, sync_file, Path(path))
    except RuntimeError:  # the loop's executor is shut down: the loop is closing, sync here
        sync_file(Path(path))


def sync_file(path: Path) -> None:
    """fsync ``path`` and its folder (the rename). A file replaced meanwhile is the newer write's to sync."""
    _sync((path, path.parent), os.fsync)


def _sync(targets: tuple[Path, ...], sync: Callable[[int], None]) -> None:
    try:
        for target in targets:
            fd = os.open(target, os.O_RDONLY)
            try:
                sync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        log.warning("config file not synced", file=str(targets[0]), error=str(exc))


class OrderedWriter:
    """Numbered snapshots of one file, written in the order they were taken.

    A snapshot is taken on the event loop that owns the state and written in a worker thread; a periodic
    write still running there must never land after a newer one (the final write made at shutdown)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seq = 0
        self._written_seq = 0

    def take(self, payload: bytes) -> tuple[int, bytes]:
        self._seq += 1
        return self._seq, payload

    def write(self, snap: tuple[int, bytes]) -> None:
        """Write the snapshot unless a newer one is already on disk."""
        seq, payload = snap
        with self._lock:
            if seq <= self._written_seq:
                return
            write_atomically(self.path, payload)
            self._written_seq = seq


def read_config(path: str | os.PathLike) -> Any | None:
    """The parsed content of ``path`` (or of its ``.bak``), or None when neither exists."""
    path = Path(path)
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            data = candidate.read_bytes()
        except FileNotFoundError:
            continue
        if not data.strip():
            continue
        try:
            return loads_lenient(data)
        except (orjson.JSONDecodeError, UnicodeDecodeError) as exc:
            log.error("config file unreadable, trying the backup", file=str(candidate), error=str(exc))
    return None


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS)
