"""A batch's records as `RecordEncoder.plan_many` and `write_many` write them (one `pack_into` of a whole-record
Struct each, the hosts and store time one field): byte for byte the records `plan` and `write` give one message
at a time, over hypothesis batches (bodies of any length, properties empty, None or long, hosts changing
mid-batch, odd flags, queue offsets counted or not). A wrong field order or width in the batch Struct fails it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from store.message import FIXED_PART_LENGTH, MessageExtBrokerInner, RecordEncoder, encode_properties

_HOSTS = [("10.0.0.9", 53211), ("192.168.1.20", 1), ("127.0.0.1", 10911)]


@st.composite
def _batch(draw) -> list[MessageExtBrokerInner]:
    msgs = []
    for k in range(draw(st.integers(1, 12))):
        props = draw(st.dictionaries(st.sampled_from(["UNIQ_KEY", "TAGS", "a", "ключ"]), st.text("0Aé", min_size=1)))
        m = MessageExtBrokerInner.create(
            "BatchT",
            draw(st.binary(max_size=6)) * draw(st.sampled_from([1, 1, 700, 5000])),
            queue_id=3,
            properties=props,
            flag=draw(st.integers(-(2**31), 2**31 - 1)),
            sys_flag=draw(st.sampled_from([0, 0x1, 0x10, 0x20, 0x31])),
            born_timestamp=1_700_000_000_000 + k,
            reconsume_times=draw(st.integers(0, 16)),
            born_host=draw(st.sampled_from(_HOSTS)),
            store_host=draw(st.sampled_from(_HOSTS[1:])),
        )
        m.properties_string = draw(st.sampled_from([encode_properties(props), None, ""]))
        m.prepared_transaction_offset = draw(st.sampled_from([0, 0, 123_456]))
        msgs.append(m)
    return msgs


@settings(max_examples=200, deadline=None)
@given(_batch(), st.integers(0, 1), st.integers(0, 1 << 40))
def test_a_batch_is_written_as_its_messages_one_by_one(msgs, step, phy) -> None:
    encoder = RecordEncoder()
    tails, crcs, sizes, total = encoder.plan_many(msgs, 1 << 30)
    assert total == sum(sizes)
    buf = bytearray(total + 8)
    phys = encoder.write_many(buf, 4, msgs, tails, crcs, sizes, 7, step, phy, 1_700_000_123_456)
    want = bytearray(total + 8)
    pos = 4
    for k, m in enumerate(msgs):
        tail, crc, size = encoder.plan(m)
        assert (tail, crc, size) == (tails[k], crcs[k], sizes[k])
        encoder.write(want, pos, m, tail, crc, size, 7 + k * step, phy + pos - 4, 1_700_000_123_456)
        assert phys[k] == phy + pos - 4 and size >= FIXED_PART_LENGTH
        pos += size
    assert bytes(buf) == bytes(want)
