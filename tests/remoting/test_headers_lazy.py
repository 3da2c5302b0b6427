"""Header decoders and encoders are compiled on first use, not at import (issue 15: boot time)."""

from __future__ import annotations

from dataclasses import field

import pytest

from remoting import headers as h


def test_a_header_compiles_on_first_use_and_keeps_the_compiled_functions():
    @h.header
    class LazyProbeHeader:
        topic: str
        queue_id: int
        offset: h.Long = 0
        order: bool = False

    stand_in = LazyProbeHeader.__header_decode__  # type: ignore[attr-defined]
    assert stand_in.__name__ == "compile_and_call"
    got = h.decode_header(LazyProbeHeader, {"topic": "T", "queueId": "3", "offset": "9", "order": "TRUE"})
    assert (got.topic, got.queue_id, got.offset, got.order) == ("T", 3, 9, True)
    compiled = LazyProbeHeader.__header_decode__  # type: ignore[attr-defined]
    assert compiled.__name__ == "decode"
    assert h.decode_header(LazyProbeHeader, {"topic": "U", "queueId": "4"}).queue_id == 4
    assert LazyProbeHeader.__header_decode__ is compiled  # type: ignore[attr-defined]
    assert h.encode_header(got) == {"topic": "T", "queueId": "3", "offset": "9", "order": "true"}
    assert LazyProbeHeader.__header_encode__.__name__ == "encode"  # type: ignore[attr-defined]
    with pytest.raises(h.HeaderError):
        h.decode_header(LazyProbeHeader, {"queueId": "1"})


def test_a_bad_declaration_still_fails_when_declared():
    with pytest.raises(TypeError, match="plain default"):

        @h.header
        class BadHeader:
            tags: str = field(default_factory=str)
