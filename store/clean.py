"""CleanService: retention of CommitLog files, then of consume queues and index files behind them.

Every `cleanResourceInterval` ms: CommitLog files older than `fileReservedTime` hours are deleted at the
hours listed in `deleteWhen`, or at any hour when the disk holding the CommitLog is fuller than
`diskMaxUsedSpaceRatio` (at once when above the forcible level), or after a manual request. Consume
queue files and index files whose entries all point below the new CommitLog min offset follow, and each
queue's min offset moves up: consumers behind it then get OFFSET_TOO_SMALL (the broker answers
PULL_OFFSET_MOVED). Above the warning level the store stops accepting puts (disk full).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from store.periodic import Periodic

if TYPE_CHECKING:
    from store.message_store import MessageStore

log = structlog.get_logger(__name__)

MAX_MANUAL_DELETE_FILE_TIMES = 20


def disk_used_ratio(path: str) -> float:
    """Fraction of the partition in use (UtilAll.getDiskPartitionSpaceUsedPercent), -1 on error."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    used = total - st.f_bfree * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    if entire <= 0:
        return -1.0
    return (used * 100 // entire + (1 if used * 100 % entire else 0)) / 100.0


class CleanService:
    def __init__(self, store: MessageStore, *, disk_ratio: Callable[[str], float] = disk_used_ratio) -> None:
        self.store = store
        self.disk_ratio = disk_ratio
        self.manual_delete_times = 0
        self.clean_immediately = False
        self._last_physical_min_offset = 0
        self._chore = Periodic("clean-service", self.run_once, lambda: store.config.clean_resource_interval / 1000)

    def start(self) -> None:
        self._chore.start()

    async def stop(self) -> None:
        await self._chore.stop()

    def execute_delete_files_manually(self) -> None:
        self.manual_delete_times = MAX_MANUAL_DELETE_FILE_TIMES
        log.info("executeDeleteFilesManually was invoked")

    def run_once(self) -> int:
        """One round; returns the number of CommitLog files deleted."""
        deleted = self.delete_expired_commit_log_files()
        self.delete_expired_logic_files()
        return deleted

    # ------------------------------------------------------------------------------------- CommitLog
    def is_time_to_delete(self) -> bool:
        hour = time.localtime(self.store.now_ms() / 1000).tm_hour
        return any(int(w) == hour for w in self.store.config.delete_when.split(";") if w.strip().isdigit())

    def is_space_to_delete(self) -> bool:
        cfg = self.store.config
        ratio = cfg.disk_max_used_space_ratio / 100.0
        self.clean_immediately = False
        full = False
        for path in (cfg.store_path_commit_log or "", cfg.store_path_consume_queue):
            used = self.disk_ratio(path) if os.path.exists(path) else -1.0
            if used > cfg.disk_space_warning_level_ratio:
                if not self.store._disk_full:
                    log.error("disk maybe full soon, so mark disk full", used=used, path=path)
                full = True
                self.clean_immediately = True
            elif used > cfg.disk_space_clean_forcibly_ratio:
                self.clean_immediately = True
            if used < 0 or used > ratio:
                if used > ratio:
                    log.info("disk maybe full soon, so reclaim space", used=used, path=path)
                self._set_disk_full(full)
                return used > ratio
        self._set_disk_full(full)
        return False

    def _set_disk_full(self, full: bool) -> None:
        if self.store._disk_full and not full:
            log.info("disk space OK, the store accepts puts again")
        self.store._disk_full = full

    def delete_expired_commit_log_files(self) -> int:
        cfg = self.store.config
        timeup = self.is_time_to_delete()
        spacefull = self.is_space_to_delete()
        manual = self.manual_delete_times > 0
        if not (timeup or spacefull or manual):
            return 0
        if manual:
            self.manual_delete_times -= 1
        clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
        log.info(
            "begin to delete expired files",
            reserved_hours=cfg.file_reserved_time,
            timeup=timeup,
            spacefull=spacefull,
            manual=manual,
            clean_at_once=clean_at_once,
        )
        mfq = self.store.commit_log.mapped_file_queue
        count = mfq.delete_expired_file_by_time(cfg.file_reserved_time * 3_600_000, self.store.now_ms(), clean_at_once)
        if count == 0 and spacefull:
            log.warning("disk space will be full soon, but delete file failed")
        return count

    # ------------------------------------------------------------------------------ queues and index
    def delete_expired_logic_files(self) -> None:
        store = self.store
        min_offset = store.commit_log.get_min_offset()
        if min_offset > self._last_physical_min_offset:
            self._last_physical_min_offset = min_offset
            for cq in list(store.dispatcher.all_consume_queues()):
                cq.delete_expired_file(min_offset)
            store.index_service.delete_expired_file(min_offset, store.unlink_later)
