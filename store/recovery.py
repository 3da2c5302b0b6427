"""Recovery: finding the valid end of the CommitLog after a stop or a crash.

`CommitLogRecovery` is upstream's recoverNormally/recoverAbnormally: after a clean stop it trusts the
offset the shutdown wrote when that is consistent with the files (else it verifies the last three
files); after a crash it starts at the newest file whose first record is older than the checkpoint and
verifies every record (magic, sizes, body CRC) forward, then zeroes and truncates the torn tail. The scan
walks the record chain reading two ints a record and checks sizes and CRCs a chunk at a time; it hands
each accepted run to `on_verified` (the pre-dispatch, store/predispatch.py) and keeps the positions it
walked (`recovered_positions`) for the replay after it. What the store does around it (consume queues,
index, where the dispatch restarts) is `StoreRecovery`.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import structlog

from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.message import MESSAGE_MAGIC_CODE, POS_STORE_TIMESTAMP, crc32
from store.record_parser import BULK_RECORDS, RecordParser, consistent_sizes

if TYPE_CHECKING:
    from store.commit_log import CommitLog
    from store.config import MessageStoreConfig
    from store.consume_queue import ConsumeQueue
    from store.dispatcher import CommitLogDispatcher
    from store.index_service import IndexService
    from store.predispatch import PreDispatch
    from store.queue_manifest import QueueManifest
    from store.reput import ReputMessageService

log = structlog.get_logger(__name__)

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


@dataclass(slots=True)
class RecoveryReport:
    process_offset: int
    dropped_bytes: int = 0
    scanned_bytes: int = 0
    records: int = 0
    start_file: str = ""


class CommitLogRecovery:
    def __init__(self, mapped_file_queue: MappedFileQueue, parser: RecordParser, check_crc: bool) -> None:
        self.mapped_file_queue = mapped_file_queue
        self.parser = parser
        self.check_crc = check_crc
        # the scan calls this with each run of records it accepted: (file offset, view, positions)
        self.on_verified: Callable[[int, memoryview, list[int]], None] | None = None
        # record positions per file (start offset) found by the scan, for the replay after it
        self.recovered_positions: dict[int, np.ndarray] = {}

    def _scan_files(self, index: int, check_crc: bool) -> RecoveryReport:
        """Verify records from the start of file `index` to the first invalid one."""
        files = self.mapped_file_queue.mapped_files
        mf = files[index]
        report = RecoveryReport(process_offset=mf.file_from_offset, start_file=mf.file_name)
        while True:
            view = mf.view
            found: list[np.ndarray] = []
            base = mf.file_from_offset
            pos, records = self._scan_view(view, 0, check_crc, found, base)
            size = self.parser.verify_record(view, pos, check_crc)  # the record the tight loop stopped at
            while size > 0:  # (only when the loop stopped for a reason it leaves to verify_record)
                found.append(np.array([pos], dtype=np.int64))
                if self.on_verified is not None:
                    self.on_verified(base, view, [pos])
                pos += size
                records += 1
                more, n = self._scan_view(view, pos, check_crc, found, base)
                pos, records = more, records + n
                size = self.parser.verify_record(view, pos, check_crc)
            if found:
                walked = np.concatenate(found)
                # the replay after recovery reuses them instead of walking the chain again
                self.recovered_positions[mf.file_from_offset] = walked[walked < pos]
            report.records += records
            report.scanned_bytes += pos
            if size == 0 and index + 1 < len(files):
                index += 1
                mf = files[index]
                continue
            break
        report.process_offset = mf.file_from_offset + pos
        report.dropped_bytes = self._dirty_bytes_after(mf, pos)
        return report

    def _scan_view(
        self, view: memoryview, pos: int, check_crc: bool, found: list[np.ndarray] | None = None, base: int = 0
    ) -> tuple[int, int]:
        """The recovery scan: (position of the first record it does not accept, records accepted). It
        accepts exactly what `verify_record` accepts; anything unusual (a BLANK, the end of the view, a
        bad record) stops it and `verify_record` decides. The chain of records is walked reading two
        ints per record; the size consistency of a chunk of records is checked with numpy and the
        body CRCs computed in one `map` over memoryview slices. `found` collects the positions walked
        (a superset of the accepted ones: the caller cuts at the returned position)."""
        records = 0
        u8 = np.frombuffer(view, dtype=np.uint8)
        while True:
            positions, after, _reason = self.parser.walk(view, pos, -1, 4 * BULK_RECORDS)
            if not positions:
                return pos, records
            if found is not None:
                found.append(np.array(positions, dtype=np.int64))
            n, crc_at = consistent_sizes(u8, positions)
            if check_crc and n:
                starts = (crc_at[0][:n]).tolist()
                ends = (crc_at[1][:n]).tolist()
                computed = np.fromiter(
                    map(crc32, map(view.__getitem__, map(slice, starts, ends))), dtype=np.int64, count=n
                )
                bad = np.flatnonzero((computed & 0x7FFFFFFF) != crc_at[2][:n])
                if bad.size:
                    n = int(bad[0])
            if n and self.on_verified is not None:
                self.on_verified(base, view, positions[:n])  # `base`: the file's CommitLog offset
            records += n
            if n < len(positions):
                return positions[n], records
            pos = after
            if len(positions) < 4 * BULK_RECORDS:
                return pos, records

    @staticmethod
    def _dirty_bytes_after(mf: MappedFile, pos: int) -> int:
        """How many bytes after the valid end were written (torn or unverifiable data being dropped).
        Stops at the first all-zero 64 KiB block: records are contiguous, so that is the end."""
        view = mf.view
        chunk = 64 * 1024
        last_dirty = pos
        p = pos
        while p < mf.file_size:
            stripped = bytes(view[p : min(p + chunk, mf.file_size)]).rstrip(b"\x00")
            if not stripped:
                break
            last_dirty = p + len(stripped)
            p += chunk
        return last_dirty - pos

    def _zero_tail(self, offset: int, length: int) -> None:
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or length <= 0:
            return
        pos = offset - mf.file_from_offset
        end = min(mf.file_size, pos + length)
        mf.view[pos:end] = bytes(end - pos)

    def recover_normally(self, clean_max_offset: int) -> RecoveryReport:
        """After a clean shutdown: trust the offset the shutdown wrote if it is consistent, else verify
        the last three files like upstream."""
        mfq = self.mapped_file_queue
        files = mfq.mapped_files
        if not files:
            mfq.flushed_where = mfq.committed_where = 0
            return RecoveryReport(process_offset=0)
        report: RecoveryReport | None = None
        if clean_max_offset >= files[0].file_from_offset and self._clean_offset_is_consistent(clean_max_offset):
            report = RecoveryReport(process_offset=clean_max_offset, start_file="checkpoint")
        if report is None:
            report = self._scan_files(max(0, len(files) - 3), self.check_crc)
        self._truncate_to(report)
        return report

    def _clean_offset_is_consistent(self, offset: int) -> bool:
        mfq = self.mapped_file_queue
        last = mfq.last_mapped_file()
        assert last is not None
        if offset > last.tail_offset:
            return False
        mf = mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return offset == last.tail_offset
        # files after it must be empty, and nothing may follow the end inside it
        if any(f.file_from_offset > mf.file_from_offset and _probe(f, 0) != bytes(8) for f in mfq.mapped_files):
            return False
        pos = offset - mf.file_from_offset
        return pos + 8 > mf.file_size or _probe(mf, pos) == bytes(8)

    def recover_abnormally(self, min_timestamp: int) -> RecoveryReport:
        """After a crash: start at the newest file whose first record was stored at or before
        `min_timestamp` (checkpoint - 3 s), verify magic and CRC forward, truncate the torn tail."""
        mfq = self.mapped_file_queue
        files = mfq.mapped_files
        if not files:
            mfq.flushed_where = mfq.committed_where = 0
            return RecoveryReport(process_offset=0)
        index = len(files) - 1
        while index >= 0:
            head = files[index].view
            magic = _INT.unpack_from(head, 4)[0]
            store_ts = _LONG.unpack_from(head, POS_STORE_TIMESTAMP)[0]
            if magic == MESSAGE_MAGIC_CODE and store_ts != 0 and store_ts <= min_timestamp:
                break
            index -= 1
        report = self._scan_files(max(index, 0), self.check_crc)
        self._truncate_to(report)
        return report

    def _truncate_to(self, report: RecoveryReport) -> None:
        mfq = self.mapped_file_queue
        offset = report.process_offset
        if report.dropped_bytes > 0:
            # zero the torn bytes: a later recovery must never mistake them for records
            self._zero_tail(offset, report.dropped_bytes)
        mfq.flushed_where = offset
        mfq.committed_where = offset
        mfq.truncate_dirty_files(offset)


class StoreRecovery:
    """The store's side of recovery (upstream DefaultMessageStore.load/recover): load the consume
    queues (a folder that cannot be loaded is set aside and rebuilt, never a failed boot), recover
    them, run the CommitLog scan with the pre-dispatch beside it, cut queues and index back to what
    the CommitLog holds, and place the reput where the dispatch must restart. The scan and the cuts
    run in a worker thread (`recover_scan`, `recover_finish`)."""

    def __init__(
        self,
        config: MessageStoreConfig,
        commit_log: CommitLog,
        dispatcher: CommitLogDispatcher,
        index_service: IndexService,
        reput: ReputMessageService,
        manifest: QueueManifest,
        io_threads: int,
    ) -> None:
        self.config = config
        self.commit_log = commit_log
        self.dispatcher = dispatcher
        self.index_service = index_service
        self.reput = reput
        self.manifest = manifest
        self.io_threads = io_threads
        self.last_recovery: dict[str, Any] = {}

    def load_consume_queues(self) -> None:
        root = self.config.store_path_consume_queue
        if os.path.isdir(root):
            for topic in sorted(os.listdir(root)):
                tdir = os.path.join(root, topic)
                if not os.path.isdir(tdir):
                    continue
                try:
                    qids = sorted(os.listdir(tdir))
                except OSError as exc:  # an unreadable topic folder: set it aside like a bad queue
                    self.set_aside(tdir, None, exc)
                    continue
                for qid in qids:
                    if not qid.lstrip("-").isdigit():
                        continue
                    cq = None
                    try:
                        cq = self.dispatcher.new_consume_queue(topic, int(qid))
                        cq.load()
                    except (OSError, ValueError) as exc:
                        self.set_aside(os.path.join(tdir, qid), cq, exc)
                        continue
                    self.dispatcher.consume_queue_table.setdefault(topic, {})[int(qid)] = cq
        self.manifest.load()

    def set_aside(self, qdir: str, cq: ConsumeQueue | None, exc: BaseException) -> None:
        """A queue folder that cannot be loaded or recovered must not stop the boot: close what was mapped and
        move the folder to ``consumequeue-set-aside/`` (inside the store). The manifest still lists the queue,
        so the reput rebuilds it from the CommitLog."""
        if cq is not None:
            try:
                cq.shutdown()
            except Exception:  # noqa: BLE001 - half-loaded: closing is best effort
                pass
        aside_root = os.path.join(self.config.store_path_root_dir, "consumequeue-set-aside")
        queue = os.path.relpath(qdir, self.config.store_path_consume_queue)
        target = os.path.join(aside_root, f"{queue.replace(os.sep, '.')}.{int(time.time() * 1000)}")
        try:
            os.makedirs(aside_root, exist_ok=True)
            os.rename(qdir, target)
        except OSError as move_error:
            target = f"not moved ({move_error})"
        log.error(
            "consume queue folder set aside, it will be rebuilt from the CommitLog",
            queue=queue,
            error=f"{type(exc).__name__}: {exc}",
            moved_to=target,
        )

    def recover_scan(self, last_exit_ok: bool, pre: PreDispatch) -> tuple[RecoveryReport, int, float]:
        """Recover the consume queues, then verify the CommitLog (all of it that may be torn) while `pre`
        dispatches what the scan accepted from where the dispatch must start. Blocking (a worker)."""
        assert self.dispatcher.checkpoint is not None
        begin = time.monotonic()
        max_phy_of_cq = -1
        for cq in list(self.dispatcher.all_consume_queues()):
            try:
                cq.recover()
            except (OSError, ValueError) as exc:
                self.dispatcher.consume_queue_table.get(cq.topic, {}).pop(cq.queue_id, None)
                self.set_aside(cq.queue_dir, cq, exc)
                continue
            max_phy_of_cq = max(max_phy_of_cq, cq.max_physic_offset)
        # (the parses run on the other worker threads: with one, they would wait behind this scan)
        if self.commit_log.mapped_file_queue.mapped_files and self.io_threads >= 2:
            pre.arm(self.dispatch_start(quiet=True))
            self.commit_log.recovery.on_verified = pre.on_verified
        try:
            return self.scan_commit_log(last_exit_ok), max_phy_of_cq, begin
        finally:
            self.commit_log.recovery.on_verified = None

    def scan_commit_log(self, last_exit_ok: bool) -> RecoveryReport:
        assert self.dispatcher.checkpoint is not None
        if last_exit_ok:
            report = self.commit_log.recovery.recover_normally(self.dispatcher.checkpoint.clean_max_offset)
        else:
            min_ts = (
                self.dispatcher.checkpoint.min_timestamp_index()
                if self.config.message_index_enable and self.config.message_index_safe
                else self.dispatcher.checkpoint.min_timestamp()
            )
            report = self.commit_log.recovery.recover_abnormally(min_ts)
        return report

    def dispatch_start(self, quiet: bool = False) -> int:
        """Where the dispatch (re)starts: where the consume queues end (upstream start()), the start
        of the CommitLog for a queue the manifest knows but whose files are gone, or for an index to
        rebuild."""
        cl_min = max(self.commit_log.get_min_offset(), 0)
        queues = list(self.dispatcher.all_consume_queues())
        reput_from = max(cl_min, max(cq.max_physic_offset for cq in queues)) if queues else cl_min
        missing = [
            (t, q)
            for t, q in self.manifest.queues
            if (cq := self.dispatcher.consume_queue_table.get(t, {}).get(q)) is None or cq.max_physic_offset < 0
        ]
        if missing:
            if not quiet:
                log.warning("consume queues missing, rebuilding them from the CommitLog", queues=len(missing))
            reput_from = cl_min
        reput_from = min(reput_from, self.commit_log.get_max_offset())
        index_from = self.index_service.rebuild_from()
        if self.config.message_index_enable and 0 <= index_from < reput_from:
            reput_from = max(cl_min, index_from)
        return reput_from

    def recover_finish(
        self, last_exit_ok: bool, report: RecoveryReport, max_phy_of_cq: int, begin: float, pre_dispatched: int
    ) -> None:
        """After the scan (and the pre-dispatch) returned: cut consume queues and index back to what the
        CommitLog holds, and place the reput. Blocking (a worker)."""
        process_offset = report.process_offset
        if not self.commit_log.mapped_file_queue.mapped_files:
            if self.dispatcher.consume_queue_table:
                log.warning("the commitlog files are deleted, and delete the consume queue files")
            for cq in self.dispatcher.all_consume_queues():
                cq.destroy()
            self.dispatcher.consume_queue_table.clear()
        elif max_phy_of_cq > process_offset:
            log.warning(
                "maxPhyOffsetOfConsumeQueue >= processOffset, truncate dirty logic files",
                max_phy_of_cq=max_phy_of_cq,
                process_offset=process_offset,
            )
            for cq in self.dispatcher.all_consume_queues():
                cq.truncate_dirty_logic_files(process_offset)
        self.index_service.truncate_beyond(process_offset)
        reput_from = self.dispatch_start()
        self.reput.reput_from_offset = reput_from
        elapsed = time.monotonic() - begin
        self.last_recovery = {
            "normal": last_exit_ok,
            "processOffset": process_offset,
            "droppedBytes": report.dropped_bytes,
            "scannedBytes": report.scanned_bytes,
            "records": report.records,
            "startFile": report.start_file,
            "reputFrom": reput_from,
            "preDispatched": pre_dispatched,
            "seconds": round(elapsed, 3),
        }
        log.info(
            "store recovered",
            normally=last_exit_ok,
            commit_log_max_offset=process_offset,
            dropped_bytes=report.dropped_bytes,
            scanned_bytes=report.scanned_bytes,
            records_checked=report.records,
            pre_dispatched=pre_dispatched,
            reput_from=reput_from,
            elapsed_s=round(elapsed, 3),
        )
        if report.dropped_bytes:
            log.warning(
                "recovery dropped a torn or unflushed CommitLog tail",
                dropped_bytes=report.dropped_bytes,
                at_offset=process_offset,
                physic_checkpoint_ts=self.dispatcher.checkpoint.physic_msg_timestamp,
            )

    def recover_topic_queue_table(self) -> None:
        table: dict[tuple[str, int], int] = {}
        min_phy = self.commit_log.get_min_offset()
        for cq in self.dispatcher.all_consume_queues():
            table[(cq.topic, cq.queue_id)] = cq.get_max_offset_in_queue()
            cq.correct_min_offset(min_phy)
        self.commit_log.topic_queue_table = table
        self.manifest.replace(set(table))


def _probe(mf: MappedFile, pos: int) -> bytes:
    """The 8 bytes at ``pos`` of ``mf``, read with ``pread``, not through the mapping.

    A first read fault in a mapping reads around it (``read_ahead_kb``: 8 MiB on this machine's disk): in the
    never-written tail of a commit-log file (a hole) that is 2048 zero pages put into the page cache, ~5 ms on
    the start's path for each probe a clean restart makes (the end of the last file and the head of the next,
    pre-allocated one), and 8 MiB of page cache each. ``pread`` of 8 bytes reads a few pages (~0.05 ms)."""
    return os.pread(mf.fd, 8, pos)
