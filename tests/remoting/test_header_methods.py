"""``@header``'s shared ``__repr__``/``__eq__`` (issue 15: not compiled per class at import) behave as the ones
dataclass would have generated."""

from __future__ import annotations

import dataclasses

import pytest

from remoting import headers as h
from remoting.header_codec import _PLAN_ATTR, Long, header

HEADERS = [c for c in vars(h).values() if isinstance(c, type) and hasattr(c, _PLAN_ATTR)]


@header
class _Probe:
    topic: str
    queue_id: int
    offset: Long
    suspend: bool | None = None


@dataclasses.dataclass(slots=True)
class _Reference:
    topic: str
    queue_id: int
    offset: int
    suspend: bool | None = None


def test_repr_eq_and_hash_are_a_dataclasses():
    probe, ref = _Probe("T", 1, 7), _Reference("T", 1, 7)
    assert repr(probe) == repr(ref).replace("_Reference", "_Probe")
    assert probe == _Probe("T", 1, 7) and probe != _Probe("T", 1, 8) and probe != ref
    assert (probe == ref) is False and probe.__eq__(ref) is NotImplemented
    with pytest.raises(TypeError):
        hash(probe)
    assert dataclasses.replace(probe, queue_id=2) == _Probe("T", 2, 7)


@pytest.mark.parametrize("cls", HEADERS, ids=lambda c: c.__name__)
def test_every_field_is_compared_and_shown(cls):
    # the shared methods walk __match_args__: a field kept out of it (kw_only, init=False) would be missed
    assert cls.__match_args__ == tuple(f.name for f in dataclasses.fields(cls))
