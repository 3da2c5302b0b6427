"""Benchmark: the vectorised `String.hashCode` of store/java_hash.py against the Horner column pass the
bulk record parser used before (`_segment_hashes` in store/commit_log.py, kept here as the baseline).

The input is what the recovery/rebuild parser hashes: for each record of a chunk, its UNIQ_KEY (32 hex
characters) and its KEYS value (8-24 characters), read as byte segments of one buffer of ~1 KiB
records. Both must give the same hashes; the figure is microseconds per key (best of 5).

    python -m bench.java_hash [--records 32768]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from store.java_hash import JavaHasher, java_string_hash

_M32 = np.uint64(0xFFFFFFFF)
_POW31 = np.concatenate([np.ones(1, dtype=np.uint64), np.cumprod(np.full(32768, 31, dtype=np.uint64))]) & _M32
_HORNER_MAX = 128


def _windows(u8: np.ndarray, width: int) -> np.ndarray:
    n = len(u8) - width + 1
    return np.lib.stride_tricks.as_strided(u8, shape=(n, width), strides=(1, 1), writeable=False)


def horner_segment_hashes(u8: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The former pass: segments grouped by length, gathered right-aligned into a matrix, one Horner
    step per column in uint32 (longer segments: a matrix product with powers of 31)."""
    lens = b - a
    n = len(a)
    h = np.empty(n, dtype=np.int64)
    exact = np.empty(n, dtype=bool)
    short = (lens <= _HORNER_MAX) & (b >= _HORNER_MAX)
    if short.any():
        bucket = np.where(short, np.maximum(lens - 1, 15) >> 4, -1)
        bucket = np.where(bucket >= 4, 3, np.where(bucket >= 2, 2, bucket))
        for k in np.unique(bucket[short]).tolist():
            sel = np.flatnonzero(bucket == k)
            width = int(lens[sel].max())
            rows = _windows(u8, width)[b[sel] - width]
            pad = width - lens[sel]
            if pad.any():
                rows[np.arange(width) < pad[:, None]] = 0
            acc = np.zeros(len(sel), dtype=np.uint32)
            seen = np.zeros(len(sel), dtype=np.uint8)
            for j in range(width):
                col = rows[:, j]
                acc *= np.uint32(31)
                acc += col
                seen |= col
            h[sel] = acc.view(np.int32)
            exact[sel] = seen < 0x80
    rest = np.flatnonzero(~short)
    for width in np.unique(lens[rest]).tolist():
        sel = rest[lens[rest] == width]
        rows = _windows(u8, width)[a[sel]]
        exact[sel] = rows.max(axis=1) < 0x80
        with np.errstate(over="ignore"):
            full = (rows.astype(np.uint64) @ _POW31[width - 1 :: -1]) & _M32
        h[sel] = full.astype(np.uint32).view(np.int32)
    return h, exact


def build(records: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    parts, a, b, texts = [], [], [], []
    pos = 0
    for i in range(records):
        uniq = f"{rng.integers(1 << 62):016X}{i:016X}"
        keys = "k" * int(rng.integers(1, 17)) + f"{i:07d}"
        filler = b"x" * 900
        for text in (uniq, keys):
            raw = text.encode()
            parts.append(filler[:40])
            pos += 40
            a.append(pos)
            parts.append(raw)
            pos += len(raw)
            b.append(pos)
            texts.append(text)
        parts.append(filler)
        pos += len(filler)
    u8 = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return u8, np.array(a, dtype=np.int64), np.array(b, dtype=np.int64), texts


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=32768)
    args = parser.parse_args(argv)
    u8, a, b, texts = build(args.records)
    hasher = JavaHasher()
    old_h, old_e = horner_segment_hashes(u8, a, b)
    new_h, new_e = hasher.segment_hashes(u8, a, b)
    sample = np.arange(0, len(texts), max(1, len(texts) // 500))
    assert (old_h == new_h).all() and (old_e == new_e).all(), "the two passes disagree"
    for x, y in ((a[0::2], b[0::2]), (a[1::2], b[1::2])):
        assert (hasher.segment_hashes(u8, x, y)[0] == horner_segment_hashes(u8, x, y)[0]).all()
    assert all(int(new_h[i]) == java_string_hash(texts[i]) for i in sample), "disagrees with the scalar hash"
    keys = len(a)
    # as the parser calls it: the UNIQ_KEY segments (one length), then the KEYS segments (mixed lengths)
    kinds = [(a[0::2], b[0::2]), (a[1::2], b[1::2])]
    t_old = best(lambda: [horner_segment_hashes(u8, x, y) for x, y in kinds])
    t_new = best(lambda: [hasher.segment_hashes(u8, x, y) for x, y in kinds])
    t_str = best(lambda: hasher.hashes(texts))
    t_scalar = best(lambda: [java_string_hash(t) for t in texts[:4096]], repeat=3) * keys / 4096
    print(f"{keys} keys (UNIQ_KEY 32 B, KEYS 8-24 B) in ~1 KiB records")
    print(f"  horner columns (before)       {t_old / keys * 1e6:7.3f} us/key")
    print(f"  running sum, byte segments     {t_new / keys * 1e6:7.3f} us/key   ({t_old / t_new:.2f}x)")
    print(f"  running sum, list[str]         {t_str / keys * 1e6:7.3f} us/key")
    print(f"  scalar java_string_hash        {t_scalar / keys * 1e6:7.3f} us/key")


if __name__ == "__main__":
    main()
