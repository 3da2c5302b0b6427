"""Recovery: finding the valid end of the CommitLog after a stop or a crash.

`CommitLogRecovery` is upstream's recoverNormally/recoverAbnormally: after a clean stop it trusts the
offset the shutdown wrote when that is consistent with the files (else it verifies the last three
files); after a crash it starts at the newest file whose first record is older than the checkpoint and
verifies every record (magic, sizes, body CRC) forward, then zeroes and truncates the torn tail. The scan
walks the record chain reading two ints a record and checks sizes and CRCs a chunk at a time; it hands
each accepted run to `on_verified` (the pre-dispatch, store/predispatch.py) and keeps the positions it
walked (`recovered_positions`) for the replay after it. What the store does around it (consume queues,
index, where the dispatch restarts) is `MessageStore._recover_*`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.message import MESSAGE_MAGIC_CODE, POS_STORE_TIMESTAMP, crc32
from store.record_parser import BULK_RECORDS, RecordParser, consistent_sizes

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
        if any(f.file_from_offset > mf.file_from_offset and bytes(f.view[:8]) != bytes(8) for f in mfq.mapped_files):
            return False
        pos = offset - mf.file_from_offset
        return pos + 8 > mf.file_size or bytes(mf.view[pos : pos + 8]) == bytes(8)

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
