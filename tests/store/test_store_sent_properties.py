"""The sent properties' fast path (`split_properties` + `stored_properties`) against the dict path it replaces.

The send processor used to decode the request's properties into a dict, set CLUSTER, drop WAIT and encode the
dict again for the record. The fast path keeps the sent pieces and edits them; for any text, the dict and the
stored string must be what the dict path gives, item order included (the record bytes are that string).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from store.message import decode_properties, encode_properties, sent_properties, split_properties, stored_properties

CLUSTER = "DefaultCluster"
# names and values that exercise every rule: the two names the broker edits, empty ones, separators inside
_NAMES = st.sampled_from(["WAIT", "CLUSTER", "TAGS", "KEYS", "UNIQ_KEY", "DELAY", "", "a", "é", "WAIT\x01"])
_VALUES = st.one_of(st.sampled_from(["true", "false", "", "x", "\x01", "a\x01b", "日本"]), st.text(max_size=6))
_PIECE = st.one_of(
    st.builds(lambda n, v: f"{n}\x01{v}", _NAMES, _VALUES),
    st.text(alphabet="ab\x01\x02 ", max_size=4),  # junk: no separator, empty, stray separators
)
_TEXT = st.builds(
    lambda pieces, trail: "\x02".join(pieces) + ("\x02" if trail else ""),
    st.lists(_PIECE, max_size=6),
    st.booleans(),
)


def dict_path(text: str, cluster: str) -> tuple[list[tuple[str, str]], str]:
    props = decode_properties(text)
    props["CLUSTER"] = cluster
    props.pop("WAIT", None)
    return list(props.items()), encode_properties(props)


@settings(max_examples=1000, deadline=None)
@given(_TEXT, st.sampled_from([CLUSTER, "c", "clü ster"]))
def test_the_fast_path_stores_what_the_dict_path_stores(text: str, cluster: str) -> None:
    props, pieces = split_properties(text)
    assert list(props.items()) == list(decode_properties(text).items())
    stored = stored_properties(props, pieces, cluster)
    assert (list(props.items()), stored) == dict_path(text, cluster)


@settings(max_examples=1000, deadline=None)
@given(_TEXT, st.sampled_from([CLUSTER, "c", "clü ster"]))
def test_the_one_call_stores_what_the_dict_path_stores(text: str, cluster: str) -> None:
    """`sent_properties` (the two steps in one call, the SEND path's common message) against the dict path."""
    props, stored = sent_properties(text, cluster)
    assert (list(props.items()), stored) == dict_path(text, cluster)
    assert sent_properties(None, cluster) == ({"CLUSTER": cluster}, f"CLUSTER\x01{cluster}")


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="7F0a\x01\x02é", max_size=40), st.sampled_from(["", "\x02", "x"]))
def test_the_java_client_s_plain_text_taken_whole_stores_what_the_dict_path_stores(uniq: str, extra: str) -> None:
    """``UNIQ_KEY\x01<id>\x02WAIT\x01true\x02`` (the benchmark Producer's text), with ids that are empty or hold
    separators, and the same text with something before or after it."""
    for text in (
        f"UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02",
        f"{extra}UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02",
        f"UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02{extra}",
    ):
        props, stored = sent_properties(text, CLUSTER)
        assert (list(props.items()), stored) == dict_path(text, CLUSTER), text


@settings(max_examples=500, deadline=None)
@given(_TEXT)
def test_without_pieces_the_dict_is_encoded(text: str) -> None:
    props = decode_properties(text)
    stored = stored_properties(props, None, CLUSTER)
    assert (list(props.items()), stored) == dict_path(text, CLUSTER)


def test_what_clients_send_takes_the_fast_path() -> None:
    # the Java client writes a separator after every pair; C++, Node and Go do not always
    for text in (
        "UNIQ_KEY\x017F0000014E2A18B4AAC27D2F6B9E0000\x02WAIT\x01true\x02",
        "WAIT\x01true\x02TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01AC11",
        "TAGS\x01TagA",
    ):
        props, pieces = split_properties(text)
        assert pieces is not None, text
        assert stored_properties(props, pieces, CLUSTER) == dict_path(text, CLUSTER)[1]


def test_texts_the_fast_path_cannot_edit_fall_back_to_the_dict() -> None:
    for text in ("a\x01b\x02a\x01c", "a\x01\x02b\x01c", "\x01b\x02c\x01d", "a\x01b\x02\x02c\x01d", "junk", "\x02"):
        props, pieces = split_properties(text)
        assert pieces is None, text
        assert props == decode_properties(text)
    assert split_properties("") == ({}, None)
    assert split_properties(None) == ({}, None)
