"""MessageStoreConfig: every knob of the store, with upstream's names (snake_case) and defaults.

The broker builds this object from its own configuration (broker.conf keys, see protocol §9); the store
never parses files itself. `validate()` is called once by `MessageStore.__init__` and raises
`StoreConfigError` with a clear sentence for inconsistent settings (e.g. a transient store pool with
SYNC_FLUSH, which upstream only allows with ASYNC_FLUSH on a master).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum

CQ_STORE_UNIT_SIZE = 20
OS_PAGE_SIZE = 4096


class StoreConfigError(ValueError):
    """A store setting has a value the store cannot run with."""


class FlushDiskType(str, Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(str, Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def _default_root() -> str:
    return os.path.join(os.path.expanduser("~"), "store")


@dataclass
class MessageStoreConfig:
    """Upstream `MessageStoreConfig` (4.9.x) fields the Python store honours; times in ms, sizes in bytes."""

    store_path_root_dir: str = field(default_factory=_default_root)
    # None → <root>/commitlog (StorePathConfigHelper)
    store_path_commit_log: str | None = None

    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_STORE_UNIT_SIZE

    flush_disk_type: FlushDiskType | str = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole | str = BrokerRole.ASYNC_MASTER
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    # upstream default true: the flush service sleeps the interval instead of waiting for a wake-up
    flush_commit_log_timed: bool = True
    commit_interval_commit_log: int = 200
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval: int = 200
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    sync_flush_timeout: int = 5000

    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5

    os_page_cache_busy_timeout_mills: int = 1000
    max_message_size: int = 4 * 1024 * 1024
    check_crc_on_recover: bool = True

    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40

    message_index_enable: bool = True
    message_index_safe: bool = False
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32

    delete_when: str = "04"
    file_reserved_time: int = 72  # hours
    disk_max_used_space_ratio: int = 75  # percent
    clean_resource_interval: int = 10_000
    clean_file_forcibly_enable: bool = True
    # upstream system properties rocketmq.broker.diskSpaceWarningLevelRatio / diskSpaceCleanForciblyRatio
    disk_space_warning_level_ratio: float = 0.90
    disk_space_clean_forcibly_ratio: float = 0.85

    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

    warm_mapped_file_enable: bool = False
    # Reserve disk blocks (fallocate) and pre-read a new commit log file in the allocator thread, so
    # first-touch faults stay cheap. Off by default, as upstream (sparse files): with it, every fresh
    # store takes two whole CommitLog files of disk (2 GiB at the default size) before a single message.
    preallocate_mapped_file: bool = False
    # Not upstream: with sparse files (above), populate this many bytes ahead of the CommitLog's write
    # position from a worker thread (madvise MADV_POPULATE_WRITE, Linux >= 5.14), so that the block
    # allocation of first-touch faults leaves the event loop; disk use stays data + this window. 0 = off.
    prefault_ahead_bytes: int = 32 * 1024 * 1024
    # Not upstream: start the disk write of appended CommitLog pages while appending (sync_file_range from a
    # thread, kicked by the pre-fault service every quarter of its window) instead of leaving all of it to the
    # next flush (store/write_behind.py). Works with the pre-fault window (sparse files, no transient pool).
    commit_log_write_behind: bool = True
    offset_check_in_slave: bool = False

    def __post_init__(self) -> None:
        self.flush_disk_type = FlushDiskType(self.flush_disk_type)
        self.broker_role = BrokerRole(self.broker_role)
        if self.store_path_commit_log is None:
            self.store_path_commit_log = os.path.join(self.store_path_root_dir, "commitlog")

    # ------------------------------------------------------------------ paths (StorePathConfigHelper)
    @property
    def store_path_consume_queue(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def store_path_index(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def store_checkpoint(self) -> str:
        return os.path.join(self.store_path_root_dir, "checkpoint")

    @property
    def abort_file(self) -> str:
        return os.path.join(self.store_path_root_dir, "abort")

    @property
    def lock_file(self) -> str:
        return os.path.join(self.store_path_root_dir, "lock")

    @property
    def queue_manifest_file(self) -> str:
        # Store-owned (not upstream): the set of known consume queues, so that a deleted queue directory
        # can be detected and rebuilt from the CommitLog.
        return os.path.join(self.store_path_root_dir, "consumequeue.manifest")

    def delay_levels_ms(self) -> list[int]:
        """`message_delay_level` parsed like upstream ScheduleMessageService.parseDelayLevel (level 1 first)."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        out: list[int] = []
        for item in self.message_delay_level.split():
            unit = item[-1:]
            if unit not in units or not item[:-1].isdigit():
                raise StoreConfigError(f"messageDelayLevel item {item!r} is not <number><s|m|h|d>")
            out.append(int(item[:-1]) * units[unit])
        return out

    def validate(self) -> None:
        """Raise StoreConfigError for settings the store cannot honour."""

        def positive(name: str) -> None:
            if getattr(self, name) <= 0:
                raise StoreConfigError(f"{name} must be > 0, got {getattr(self, name)}")

        for name in (
            "mapped_file_size_commit_log",
            "mapped_file_size_consume_queue",
            "flush_interval_commit_log",
            "commit_interval_commit_log",
            "flush_interval_consume_queue",
            "sync_flush_timeout",
            "max_message_size",
            "max_hash_slot_num",
            "max_index_num",
            "os_page_cache_busy_timeout_mills",
        ):
            positive(name)
        if self.prefault_ahead_bytes < 0:
            raise StoreConfigError(f"prefault_ahead_bytes must be >= 0 (0 = off), got {self.prefault_ahead_bytes}")
        if self.mapped_file_size_consume_queue % CQ_STORE_UNIT_SIZE:
            raise StoreConfigError(
                f"mappedFileSizeConsumeQueue must be a multiple of {CQ_STORE_UNIT_SIZE}, "
                f"got {self.mapped_file_size_consume_queue}"
            )
        if self.mapped_file_size_commit_log > 0x7FFFFFFF:
            raise StoreConfigError("mappedFileSizeCommitLog must fit in a signed int32 (upstream limit)")
        if self.mapped_file_size_commit_log < 4096:
            raise StoreConfigError(
                f"mappedFileSizeCommitLog must be at least 4096 bytes, got {self.mapped_file_size_commit_log}"
            )
        if self.transient_store_pool_enable:
            if self.flush_disk_type != FlushDiskType.ASYNC_FLUSH:
                raise StoreConfigError(
                    "transientStorePoolEnable=true requires flushDiskType=ASYNC_FLUSH "
                    f"(got {self.flush_disk_type.value}); upstream only uses the pool with asynchronous flush"
                )
            if self.broker_role == BrokerRole.SLAVE:
                raise StoreConfigError("transientStorePoolEnable=true is only valid on a master (brokerRole is SLAVE)")
            positive("transient_store_pool_size")
        for part in self.delete_when.split(";"):
            if not part.strip().isdigit() or not 0 <= int(part) <= 23:
                raise StoreConfigError(f"deleteWhen must be hours 0-23 separated by ';', got {self.delete_when!r}")
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            # upstream clamps to [10, 95] in getDiskMaxUsedSpaceRatio; we say so instead of guessing
            raise StoreConfigError(f"diskMaxUsedSpaceRatio must be within 10..95, got {self.disk_max_used_space_ratio}")
        self.delay_levels_ms()
