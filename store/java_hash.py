"""Java's `String.hashCode`, the one implementation: a scalar one and one vectorised core.

RocketMQ hashes strings with `String.hashCode` in three places we must match bit for bit: the tags
code of a consume queue entry, the subscription's code set, and the index key (`abs(hashCode(topic +
"#" + key))`, 0 for Integer.MIN_VALUE). `java_string_hash` is the scalar reference;
`hash_units` is the vectorised core every bulk path uses, over UTF-16 code units (or, for ASCII text,
bytes: the same numbers):

For a segment at units [a, e) of an array c, hashCode = sum c[j] * 31**(e-1-j) mod 2**32. 31 is odd,
so it has an inverse I modulo 2**32, and that sum is 31**(e-1) * sum c[j] * I**j: one running sum of
c[j] * I**j over all segments, its differences at the segment ends, each times 31**(e-1). uint32
arithmetic wraps modulo 2**32 as Java's int does. `bench/java_hash.py` compares it with the Horner
column pass the bulk record parser used before (it is not slower on index keys).
"""

from __future__ import annotations

import sys
from operator import mul

import numpy as np

_INV31 = pow(31, -1, 1 << 32)  # 31 is odd, so it has an inverse modulo 2**32
_INT_MIN = -0x80000000
# 31**k mod 2**32 for k < _TABLE_UNITS (java_string_hash: a key's units, last first, times these)
_TABLE_UNITS = 512
_POWERS31 = tuple(pow(31, k, 1 << 32) for k in range(_TABLE_UNITS))
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"  # (memoryview.cast("H") reads native)


def java_string_hash(s: str) -> int:
    """J `String.hashCode()`: h = 31h + c over UTF-16 code units, as a signed int32.

    Written out, that is sum c[j] * 31**(n-1-j) mod 2**32: the units, last first, times a table of powers, summed by
    ``map`` and ``sum`` in C. A lone send hashes its index key (topic#UNIQ_KEY, ~46 units) here, and the loop of
    ``31 * h + c`` per unit cost ~520 bytecodes a send; this is ~15 and 0.75x the time (timeit: the products are
    still Python ints; tests/store/test_store_java_hash.py pins it against that loop). Longer text goes in pieces of the table's length, each folded in as h * 31**len + piece."""
    units: bytes | memoryview
    if s.isascii():
        units = s.encode("ascii")
    else:
        units = memoryview(s.encode(_UTF16_NATIVE, "surrogatepass")).cast("H")  # (a lone surrogate: one unit)
    n = len(units)
    if n <= _TABLE_UNITS:
        h = sum(map(mul, reversed(units), _POWERS31)) & 0xFFFFFFFF
    else:
        h = 0
        for at in range(0, n, _TABLE_UNITS):
            piece = units[at : at + _TABLE_UNITS]
            h = h * pow(31, len(piece), 1 << 32) + sum(map(mul, reversed(piece), _POWERS31))
        h &= 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: Math.abs(hashCode), 0 for Integer.MIN_VALUE."""
    h = java_string_hash(key)
    return 0 if h == _INT_MIN else abs(h)


def abs_hashes(h: np.ndarray) -> np.ndarray:
    """`index_key_hash` of signed hashes, as an int64 array (Math.abs(Integer.MIN_VALUE) → 0)."""
    out = np.abs(h.astype(np.int64))
    out[out == 0x80000000] = 0
    return out


def _power_table(base: int, n: int) -> np.ndarray:
    """base**j mod 2**32 for j in range(n), as uint32 (numpy's uint32 products wrap modulo 2**32)."""
    out = np.empty(max(n, 1), dtype=np.uint32)
    out[0] = 1
    if n > 1:
        np.cumprod(np.full(n - 1, base, dtype=np.uint32), dtype=np.uint32, out=out[1:])
    return out


class JavaHasher:
    """`String.hashCode` for many strings or byte segments at once (`hash_units`), keeping its power
    tables between calls (they grow by doubling up to what one pass can need)."""

    MIN_VECTOR = 8  # below this many strings the scalar loop is cheaper
    CHUNK_UNITS = 1 << 20  # code units per pass: bounds the temporary arrays (4 MiB each)
    ROW_UNITS_MAX = 4096  # keys of one length up to this: one matrix product (`_rows_hashes`), exact in float64

    def __init__(self) -> None:
        # (powers of 31, powers of its inverse), replaced as one tuple: parses in worker threads share it. Empty
        # until the first hash: a module-level hasher must not import numpy at start (broker.deferred_import)
        self._tables: tuple[np.ndarray, np.ndarray] | tuple[()] = ()
        self._row_weights: dict[int, np.ndarray] = {}  # key length → its powers of 31, highest first

    def _powers(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        tables = self._tables
        if not tables or len(tables[0]) < n:
            size = max(n, min(2 * len(tables[0]) if tables else 1, 2 * self.CHUNK_UNITS))
            tables = self._tables = (_power_table(31, size), _power_table(_INV31, size))
        return tables

    def hash_units(self, units: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Signed hashCode (int64) of consecutive segments of `units` (code units; each segment ends
        at the index in `ends`, exclusive, and starts where the one before ended; units between a
        segment's end and the next one's start must be 0, which adds nothing to a sum)."""
        n = len(units)
        if n == 0 or len(ends) == 0:
            return np.zeros(len(ends), dtype=np.int64)
        p31, pinv = self._powers(n)
        running = units.astype(np.uint32)
        running *= pinv[:n]
        np.cumsum(running, dtype=np.uint32, out=running)
        zero = np.uint32(0)
        last = np.maximum(ends - 1, 0)
        sums = np.where(ends > 0, running[last], zero)  # the running sum through each segment's end
        before = np.concatenate(([0], ends[:-1])) - 1  # ... and through the end of the one before it
        sums -= np.where(before >= 0, running[np.maximum(before, 0)], zero)
        sums *= p31[last]
        return sums.view(np.int32).astype(np.int64)

    def hashes(self, keys: list[str]) -> np.ndarray:
        """Signed 32-bit String.hashCode of every key, as int64."""
        n = len(keys)
        if n < self.MIN_VECTOR:
            return np.array([java_string_hash(k) for k in keys], dtype=np.int64)
        width = len(keys[0])
        if (
            0 < width <= self.ROW_UNITS_MAX
            and n * width <= self.CHUNK_UNITS  # (the product's float64 copy of the bytes: at most 8 MiB)
            and min(map(len, keys)) == width == max(map(len, keys))
        ):
            joined = "".join(keys)
            if joined.isascii():
                return self._rows_hashes(joined.encode("ascii"), n, width)
        return self.units_hashes(keys)

    def units_hashes(self, keys: list[str]) -> np.ndarray:
        """`hashes` of any keys (any lengths, any text) by `hash_units` over their UTF-16 code units."""
        n = len(keys)
        joined = "\0".join(keys)
        if len(joined) > self.CHUNK_UNITS:
            half = n // 2
            return np.concatenate([self.units_hashes(keys[:half]), self.units_hashes(keys[half:])])
        units = np.frombuffer((joined + "\0").encode("utf-16-le", "surrogatepass"), dtype="<u2")
        ends = np.flatnonzero(units == 0)  # where each key ends (the NUL after it)
        if len(ends) != n:  # a key holds NUL itself
            lengths = np.fromiter((len(k.encode("utf-16-le", "surrogatepass")) // 2 for k in keys), np.int64, n)
            ends = np.cumsum(lengths + 1) - 1
        return self.hash_units(units, ends)

    def _rows_hashes(self, data: bytes, n: int, width: int) -> np.ndarray:
        """Signed hashCode of `n` ASCII keys of `width` bytes each, back to back in `data`: each row of the (n,
        width) byte matrix times the powers 31**(width-1-j) (reduced mod 2**32), one matrix product. The index
        keys of a round are mostly one length (topic#UNIQ_KEY), where this is several times cheaper than
        `hash_units`' passes. In float64, which BLAS multiplies fastest, and exact: every term and partial sum is
        an integer below 2**51 (a byte below 2**7 times a power below 2**32, at most 2**12 of them), and float64
        holds every integer below 2**53 exactly, in whatever order the sums are taken."""
        weights = self._row_weights.get(width)
        if weights is None:
            if len(self._row_weights) >= 64:
                self._row_weights.clear()
            weights = self._row_weights[width] = _power_table(31, width)[::-1].astype(np.float64)
        sums = np.frombuffer(data, dtype=np.uint8).reshape(n, width).astype(np.float64) @ weights
        return (sums.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)

    def abs_hashes(self, keys: list[str]) -> np.ndarray:
        """index_key_hash of every key, as an int64 array."""
        return abs_hashes(self.hashes(keys))

    def hash_many(self, keys: list[str]) -> list[int]:
        return self.hashes(keys).tolist()

    def segment_hashes(
        self, u8: np.ndarray, a: np.ndarray, b: np.ndarray, unless: int = -1
    ) -> tuple[np.ndarray, np.ndarray]:
        """Signed hashCode of the byte segments [a, b) of `u8` read as text, and whether that is exact
        (all-ASCII segments, where UTF-8 bytes are the UTF-16 units; with `unless`, also: not holding
        that byte). The segments' bytes are gathered into one array (one pass per CHUNK_UNITS)."""
        n = len(a)
        if n == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=bool)
        lens = (b - a).astype(np.int64)
        ends = np.cumsum(lens)
        total = int(ends[-1])
        if total > self.CHUNK_UNITS and n > 1:
            half = n // 2
            h1, e1 = self.segment_hashes(u8, a[:half], b[:half], unless)
            h2, e2 = self.segment_hashes(u8, a[half:], b[half:], unless)
            return np.concatenate([h1, h2]), np.concatenate([e1, e2])
        width = int(lens[0])
        if width > 0 and (lens == width).all() and int(a.max()) + width <= len(u8):
            # one length (UNIQ_KEY, a run of one tag): the segments as rows of a sliding-window view
            windows = np.lib.stride_tricks.as_strided(
                u8, shape=(len(u8) - width + 1, width), strides=(1, 1), writeable=False
            )
            rows = windows[a]
            exact = rows.max(axis=1) < 0x80
            if unless >= 0:
                exact &= ~(rows == unless).any(axis=1)
            return self.hash_units(rows.reshape(-1), ends), exact
        starts = ends - lens
        index = np.arange(total, dtype=np.int64)
        index += np.repeat(a - starts, lens)
        units = u8[index]
        nonempty = lens > 0
        exact = np.ones(n, dtype=bool)
        if total:
            at = starts[nonempty]
            exact[nonempty] = np.maximum.reduceat(units, at) < 0x80
            if unless >= 0:
                exact[nonempty] &= np.add.reduceat((units == unless).astype(np.int64), at) == 0
        return self.hash_units(units, ends), exact


def combine(prefix_hash: np.ndarray, value_hash: np.ndarray, value_len: np.ndarray) -> np.ndarray:
    """hashCode(prefix + value) from hashCode(prefix), hashCode(value) and len(value), signed int64."""
    p31 = _power_table(31, int(value_len.max()) + 1) if len(value_len) else _power_table(31, 1)
    h = (prefix_hash.astype(np.uint32) * p31[value_len]) + value_hash.astype(np.uint32)
    return h.astype(np.uint32).view(np.int32).astype(np.int64)
