"""store/java_hash.py: the vectorised String.hashCode paths agree with the scalar reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from store.java_hash import JavaHasher, abs_hashes, combine, index_key_hash, java_string_hash


def _hash_code_loop(s: str) -> int:
    """Java's String.hashCode as its loop reads it: h = 31h + c over the UTF-16 code units, int arithmetic."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=80),
        st.text(alphabet=st.characters(max_codepoint=0x7F), min_size=500, max_size=1600),  # past the power table
        st.text(min_size=500, max_size=1200),  # non-ASCII pieces of the table's length, surrogate pairs
        st.lists(st.integers(0xD800, 0xDFFF) | st.integers(0x20, 0x7E), max_size=8).map(lambda u: "".join(map(chr, u))),
    )
)
def test_scalar_hash_is_the_per_unit_loop(text):
    """java_string_hash (a table of powers summed in C) equals the per-unit loop for ASCII, non-ASCII,
    astral (two units) and lone-surrogate text, and for text longer than the table (folded in pieces)."""
    assert java_string_hash(text) == _hash_code_loop(text)


def test_known_values():
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("ä") == 228
    assert index_key_hash("polygenelubricants") == 0  # Math.abs(Integer.MIN_VALUE)
    assert abs_hashes(np.array([-0x80000000, -5, 7])).tolist() == [0, 5, 7]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=200), min_size=1, max_size=40), st.integers(0, 3))
def test_segment_hashes_match_scalar(texts, gap):
    """Byte segments of one buffer (with bytes between them): exact for ASCII text without the `unless`
    byte, and then equal to the scalar hash; combine() joins a prefix hash and a segment hash."""
    raw, a, b = bytearray(), [], []
    for t in texts:
        raw += b"\x02" * gap
        a.append(len(raw))
        raw += t.encode("utf-8", "surrogatepass")
        b.append(len(raw))
    u8 = np.frombuffer(bytes(raw) + bytes(8), dtype=np.uint8)
    h, exact = JavaHasher().segment_hashes(u8, np.array(a), np.array(b), unless=ord(" "))
    for t, hv, ok in zip(texts, h.tolist(), exact.tolist()):
        assert ok == (t.isascii() and " " not in t)
        if ok:
            assert hv == java_string_hash(t)
            joined = combine(np.array([java_string_hash("topic#")]), np.array([hv]), np.array([len(t)]))
            assert int(joined[0]) == java_string_hash("topic#" + t)


def test_tables_grow_for_long_input():
    keys = ["k" * 3000 + str(i) for i in range(20)]
    assert JavaHasher().hash_many(keys) == [java_string_hash(k) for k in keys]


def test_segments_of_one_length():
    """The one-length path (rows of a window view): exactness per segment, hashes as the scalar's."""
    texts = ["abcd", "ab d", "äbc", "wxyz"]  # "äbc" is 4 bytes of UTF-8, like the others
    raw = b"".join(b"\x00\x02" + t.encode() for t in texts)
    u8 = np.frombuffer(raw, dtype=np.uint8)
    a = np.array([2 + 6 * i for i in range(4)])
    h, exact = JavaHasher().segment_hashes(u8, a, a + 4, unless=ord(" "))
    assert exact.tolist() == [True, False, False, True]
    assert [h[0], h[3]] == [java_string_hash("abcd"), java_string_hash("wxyz")]


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 300),
    st.lists(st.text(alphabet=st.characters(max_codepoint=0x7F), min_size=300, max_size=300), min_size=1, max_size=40),
    st.sampled_from(["", "ä", "\ud800", "\x00"]),
)
def test_keys_of_one_length_match_scalar(width, texts, odd):
    """Index keys of one length (topic#UNIQ_KEY): the one-matrix-product path (`_rows_hashes`) for ASCII keys,
    whatever their bytes (NUL, 0x7F, the highest powers); a non-ASCII key among them, or a length that differs,
    takes the other paths: every key's hash is the scalar's either way."""
    keys = [t[:width] for t in texts] * 3  # at least MIN_VECTOR of them
    hasher = JavaHasher()
    assert hasher.hash_many(keys) == [java_string_hash(k) for k in keys]
    if odd:
        mixed = keys + [odd * width]
        assert hasher.hash_many(mixed) == [java_string_hash(k) for k in mixed]
    shorter = keys + [keys[0][:-1]]
    assert hasher.hash_many(shorter) == [java_string_hash(k) for k in shorter]


def test_keys_of_one_length_take_one_matrix_product(monkeypatch):
    hasher = JavaHasher()
    calls = []
    real = hasher._rows_hashes
    monkeypatch.setattr(hasher, "_rows_hashes", lambda *a: calls.append(a[1:]) or real(*a))
    keys = [f"BenchmarkTest#7F0000014E2A18B4AAC27D2F6B9E{i:04X}" for i in range(50)]
    assert hasher.abs_hashes(keys).tolist() == [index_key_hash(k) for k in keys]
    assert calls == [(50, len(keys[0]))]
    long_keys = ["\x7f" * JavaHasher.ROW_UNITS_MAX] * 8  # the largest sums the float64 product must hold exactly
    assert hasher.hash_many(long_keys) == [java_string_hash(long_keys[0])] * 8
