"""Acceptance tests with the real Node.js client `ali-ons` (pinned in tests/compat/node/package.json).

ali-ons facts that shape these tests (read from its lib/): it needs an `httpclient` (urllib 2.x) even with
`nameSrv`; it signs requests with accessKey/secretKey, which the broker ignores while ACL is off, so the driver
passes dummies; a producer treats TOPIC_NOT_EXIST from the name server as fatal (no TBW102 fallback), so an
uncreated topic works only if the name server answers with a route; it sends SEND_MESSAGE_V2 (310) without
UNIQ_KEY, so its msgId is the broker's offset msg id on both sides; it zlib-compresses bodies >= 4 KiB; it
throws a broker error response (other than 1/14/16/17/204/205) at once with the broker's remark as message.
The driver consumes with CONSUME_FROM_FIRST_OFFSET, so the tests can send first and consume afterwards.
"""

from __future__ import annotations

import os

import pytest
from compat_support import (
    Collector,
    b64,
    compressible_body,
    counts_by_key,
    cpp_producer,
    cpp_push_consumer,
    describe_missing,
    make_message,
    nul_free_body,
    run_ons,
    unb64,
    unique,
)

pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("node_ready")]


def ons_message(key: str, body: bytes, tags: str | None = None, props: dict[str, str] | None = None) -> dict:
    msg = {"body_b64": b64(body), "keys": [key]}
    if tags:
        msg["tags"] = tags
    if props:
        msg["props"] = props
    return msg


def received_by_key(run) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for event in run.of("received"):
        out.setdefault(event["keys"], []).append(event)
    return out


def test_produce_and_consume_on_a_topic_nobody_created(broker):
    topic, group = unique("T_ons"), unique("CG_ons")
    bodies = {
        "empty-ish": b"\x00",
        "binary": bytes(range(256)) * 2,  # NUL and every other byte value
        "zlib": compressible_body(6000, "zlib") + b"\x00\xff",  # >= 4 KiB: ali-ons compresses it
        "big": os.urandom(70_000),
        "text": "héllo wörld ✓".encode(),
    }
    messages = [ons_message(k, v, tags="TagX", props={"origin": "node"}) for k, v in bodies.items()]
    run = run_ons(
        {"nameSrv": broker.namesrv_addr, "mode": "both", "topic": topic, "group": group, "messages": messages}
    )
    assert run.rc == 0 and not run.of("send_error") and not run.of("fatal"), run.describe()
    sent = {m["index"]: m for m in run.of("sent")}
    assert len(sent) == len(bodies), run.describe()

    got = received_by_key(run)
    assert set(got) == set(bodies), run.describe()
    keys = list(bodies)
    for key, events in got.items():
        assert len(events) == 1, f"{key} received {len(events)} times"
        event = events[0]
        assert unb64(event["body_b64"]) == bodies[key], f"{key}: body differs"
        assert event["topic"] == topic and event["tags"] == "TagX" and event["props"].get("origin") == "node"
        reply = sent[keys.index(key)]
        # ali-ons sets no UNIQ_KEY: the msgId it gets back from the send is the broker's offset msg id, and
        # the consumer rebuilds the same id from the stored record's store host and commit-log offset.
        assert event["msgId"] == reply["msgId"], f"{key}: consumed msgId {event['msgId']} != sent {reply['msgId']}"
        assert (event["queueId"], event["queueOffset"]) == (reply["queueId"], reply["queueOffset"])


def test_tag_filter(broker):
    topic, group = unique("T_ons_tags"), unique("CG_ons")
    messages, wanted = [], set()
    for tag in ("TagA", "TagB", "TagC", None):
        for i in range(3):
            key = f"{tag}-{i}"
            messages.append(ons_message(key, f"body {key}".encode(), tags=tag))
            if tag in ("TagA", "TagB"):
                wanted.add(key)
    produced = run_ons({"nameSrv": broker.namesrv_addr, "mode": "produce", "topic": topic, "messages": messages})
    assert produced.rc == 0 and len(produced.of("sent")) == len(messages), produced.describe()
    run = run_ons(
        {
            "nameSrv": broker.namesrv_addr,
            "mode": "consume",
            "topic": topic,
            "group": group,
            "subExpression": "TagA || TagB",
            "expect": len(wanted),
            "idleMs": 1000,
        }
    )
    assert run.rc == 0, run.describe()
    got = received_by_key(run)
    assert set(got) == wanted, run.describe()
    assert all(len(v) == 1 for v in got.values()), {k: len(v) for k, v in got.items()}


def test_sql92_filter_when_enabled(broker_factory):
    b = broker_factory.start("enablePropertyFilter=true", name="sql")
    topic, group = unique("T_ons_sql"), unique("CG_ons")
    messages = [ons_message(f"k{i}", f"b{i}".encode(), props={"a": str(i)}) for i in range(10)]
    produced = run_ons({"nameSrv": b.namesrv_addr, "mode": "produce", "topic": topic, "messages": messages})
    assert produced.rc == 0 and len(produced.of("sent")) == 10, produced.describe()
    # ali-ons does not filter SQL92 itself: whatever arrives is what the broker selected.
    run = run_ons(
        {
            "nameSrv": b.namesrv_addr,
            "mode": "consume",
            "topic": topic,
            "group": group,
            "sql": "a > 5",
            "expect": 4,
            "idleMs": 1000,
        }
    )
    assert run.rc == 0, run.describe()
    assert sorted(received_by_key(run)) == ["k6", "k7", "k8", "k9"], run.describe()


def test_cpp_producer_to_node_consumer_and_back(broker):
    """Each client decodes what the other wrote: C++ zlib bodies and UNIQ_KEY for ali-ons, V2 sends for C++."""
    topic, group = unique("T_cross"), unique("CG_cross")
    from_cpp = {"cpp-small": nul_free_body(120, "cpp-small"), "cpp-zlib": compressible_body(9000, "cpp-zlib")}
    with cpp_producer(broker.namesrv_addr) as producer:
        for key, body in from_cpp.items():
            producer.send_sync(make_message(topic, body, key=key, tags="FromCpp"))
    run = run_ons({"nameSrv": broker.namesrv_addr, "mode": "consume", "topic": topic, "group": group, "expect": 2})
    assert run.rc == 0, run.describe()
    got = received_by_key(run)
    assert {k: [unb64(e["body_b64"]) for e in v] for k, v in got.items()} == {k: [v] for k, v in from_cpp.items()}

    from_node = {"node-1": nul_free_body(300, "node-1"), "node-zlib": compressible_body(5000, "node-zlib")}
    produced = run_ons(
        {
            "nameSrv": broker.namesrv_addr,
            "mode": "produce",
            "topic": topic,
            "messages": [ons_message(k, v, tags="FromNode") for k, v in from_node.items()],
        }
    )
    assert produced.rc == 0 and len(produced.of("sent")) == 2, produced.describe()
    collector = Collector()
    with cpp_push_consumer(broker.namesrv_addr, unique("CG_cpp"), {topic: "FromNode"}, collector):
        assert collector.wait_keys(from_node, 15), describe_missing(from_node, collector.items())
        collector.settle(0.5)
    items = collector.items()
    assert counts_by_key(items) == {k: 1 for k in from_node}, describe_missing(from_node, items)
    assert all(i.body == from_node[i.key] for i in items)


def test_body_over_broker_max_message_size_is_refused_with_a_clear_remark(broker_factory):
    b = broker_factory.start("maxMessageSize=1024", name="max1k")
    topic, group = unique("T_ons_max"), unique("CG_ons")
    messages = [ons_message("small", b"x" * 100), ons_message("big", os.urandom(2000))]
    run = run_ons({"nameSrv": b.namesrv_addr, "mode": "both", "topic": topic, "group": group, "messages": messages})
    errors = run.of("send_error")
    assert [e["index"] for e in errors] == [1], run.describe()
    assert errors[0]["code"] == 13, f"expected MESSAGE_ILLEGAL (13): {errors[0]}"
    assert "1024" in errors[0]["message"], f"the refusal should name the limit maxMessageSize=1024: {errors[0]}"
    assert sorted(received_by_key(run)) == ["small"], run.describe()


@pytest.mark.parametrize(("support_retry", "expected"), [("true", ["r-10"]), ("false", ["r-1", "r-10"])])
def test_retried_messages_follow_the_sql92_subscription_with_filter_support_retry(
    broker_factory, support_retry, expected
):
    """filterSupportRetry: ali-ons subscribes its group's retry topic with `*`; with the option the broker
    filters what it pulls from there by the group's SQL92 subscription to each message's original topic
    (RETRY_TOPIC), without it every retried message comes back. The retried messages are put into the
    retry topic by a producer, as the broker's send-back would (RETRY_TOPIC set)."""
    b = broker_factory.start(
        "enablePropertyFilter=true", f"filterSupportRetry={support_retry}", name=f"retry-sql-{support_retry}"
    )
    topic, group = unique("T_ons_retry"), unique("CG_ons_retry")
    retried = [
        ons_message(f"r-{a}", f"retried {a}".encode(), props={"a": str(a), "RETRY_TOPIC": topic}) for a in (1, 10)
    ]
    produced = run_ons({"nameSrv": b.namesrv_addr, "mode": "produce", "topic": f"%RETRY%{group}", "messages": retried})
    assert produced.rc == 0 and len(produced.of("sent")) == 2, produced.describe()
    run = run_ons(
        {
            "nameSrv": b.namesrv_addr,
            "mode": "consume",
            "topic": topic,
            "group": group,
            "sql": "a > 5",
            "expect": len(expected),
            "idleMs": 1500,
        }
    )
    assert run.rc == 0, run.describe()
    assert sorted(received_by_key(run)) == expected, run.describe()
