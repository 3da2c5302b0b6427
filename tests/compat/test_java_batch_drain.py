"""The Apache RocketMQ 4.9.7 Java client drains batches: each batch goes to one queue, so a pull of its records finds
them back to back in the commit log and the broker answers them as one view of it (``GetMessageResult.span``, see
``tests/store/test_store_read_chunks.py``). The Java push consumer, in each header serialization, must decode every
record of those answers: the keys, bodies, queues and queue offsets it reports are the ones sent."""

from __future__ import annotations

import json

import pytest
from compat_support import JAVA_MISSING, java_client_missing, run_java_source, unique

BATCHES, SIZE = 12, 40  # 480 messages: pulls of 32 over runs of 40 back-to-back records per batch

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.skipif(java_client_missing(), reason=JAVA_MISSING)]


@pytest.mark.parametrize("serialize", ["JSON", "ROCKETMQ"])
def test_java_push_consumer_drains_batched_queues(broker, serialize: str) -> None:
    topic, group = unique(f"T_jbatch_{serialize}"), unique(f"CG_jbatch_{serialize}")
    mark = broker.log_size()
    events = run_java_source(
        "BatchRoundTrip.java", [broker.namesrv_addr, topic, group, str(BATCHES), str(SIZE)], 240, serialize=serialize
    )
    detail = json.dumps(events[-20:])
    assert events[-1]["complete"] is True, detail
    received = [e for e in events if e["event"] == "received"]
    by_key = {e["key"]: e for e in received}
    assert sorted(by_key) == sorted(f"k{k}" for k in range(BATCHES * SIZE)), detail
    for k in range(BATCHES * SIZE):
        assert by_key[f"k{k}"]["body"] == f"java batch {k}"
    # each batch's messages sit in one queue at consecutive offsets: the layout the one-view answer serves
    for b in range(BATCHES):
        batch = [by_key[f"k{b * SIZE + i}"] for i in range(SIZE)]
        assert len({e["queue"] for e in batch}) == 1
        assert [e["offset"] for e in batch] == list(range(batch[0]["offset"], batch[0]["offset"] + SIZE))
    log = broker.log_text(mark)
    assert "Traceback" not in log and "bad request header" not in log
