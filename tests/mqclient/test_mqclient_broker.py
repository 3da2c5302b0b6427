"""mqclient against our real broker (a subprocess on free loopback ports)."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import pytest

from bench.broker_proc import SMALL_STORE, BrokerProcess
from broker.testing.ports import free_port
from mqclient import (
    AdminClient,
    AdminError,
    ConsumerConfig,
    Message,
    NameServerUnreachableError,
    Producer,
    ProducerConfig,
    PushConsumer,
    SendFailedError,
)

_topics = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("mqclient-broker"), config=SMALL_STORE) as b:
        yield b


async def new_topic(ns: str, queues: int = 4) -> str:
    topic = f"mqc-{next(_topics)}"
    async with AdminClient(ns) as admin:
        await admin.create_topic_everywhere(topic, queues)
    return topic


def fast(group: str, **kw) -> ConsumerConfig:
    return ConsumerConfig(
        group=group,
        suspend_timeout_ms=1000,
        pull_delay_on_error_ms=200,
        commit_interval_s=0.5,
        rebalance_interval_s=1.0,
        **kw,
    )


async def wait_for(pred, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def test_every_send_mode_arrives_once(broker):
    ns = broker.namesrv
    topic = await new_topic(ns)
    sent: dict[str, bytes] = {}
    async with Producer(ns, ProducerConfig(group="pg")) as p:
        for i in range(20):
            r = await p.send(Message(topic, f"sync-{i}".encode()))
            sent[r.msg_id] = f"sync-{i}".encode()
        results = await asyncio.gather(*(p.send_async(Message(topic, f"async-{i}".encode())) for i in range(20)))
        for i, r in enumerate(results):
            sent[r.msg_id] = f"async-{i}".encode()
        r = await p.send_batch([Message(topic, f"batch-{i}".encode()) for i in range(5)])
        for i, key in enumerate(r.msg_id.split(",")):
            sent[key] = f"batch-{i}".encode()
        await p.send_oneway(Message(topic, b"oneway", properties={"ow": "1"}))
    got: list = []
    async with PushConsumer(ns, topic, fast("cg-modes"), lambda m, mq: got.append(m)) as c:
        await wait_for(lambda: len(got) >= len(sent) + 1)
        await wait_for(lambda: not c.cached_messages)
        assert await c.caught_up()
    by_key = {m.msg_id: m.body for m in got}
    assert len(got) == len(sent) + 1
    for key, body in sent.items():
        assert by_key[key] == body
    assert any(m.properties.get("ow") == "1" for m in got)
    # offsets were committed at close: the group resumes past everything
    again: list = []
    async with PushConsumer(ns, topic, fast("cg-modes"), lambda m, mq: again.append(m)) as c2:
        await asyncio.sleep(1.0)
        assert await c2.caught_up()
    assert again == []


async def test_two_consumers_split_the_queues(broker):
    ns = broker.namesrv
    topic = await new_topic(ns, queues=4)
    seen: Counter[str] = Counter()
    owners: dict[int, set[str]] = {}

    def listener(name):
        def on(m, mq):
            seen[m.msg_id] += 1
            owners.setdefault(mq.queue_id, set()).add(name)

        return on

    c1 = PushConsumer(ns, topic, fast("cg-split"), listener("c1"))
    c2 = PushConsumer(ns, topic, fast("cg-split"), listener("c2"))
    try:
        await c1.start()
        await c2.start()
        await c1.rebalance()
        await c2.rebalance()
        assert sorted(q.queue_id for q in c1.assigned + c2.assigned) == [0, 1, 2, 3]
        assert not set(c1.assigned) & set(c2.assigned)
        async with Producer(ns) as p:
            keys = [(await p.send(Message(topic, b"x"))).msg_id for _ in range(40)]
        await wait_for(lambda: len(seen) == 40)
        assert set(seen) == set(keys) and max(seen.values()) == 1
        assert all(len(v) == 1 for v in owners.values())
    finally:
        await c1.close()
        await c2.close()


async def test_page_cache_stall_answers_busy(broker):
    ns = broker.namesrv
    topic = await new_topic(ns)
    async with AdminClient(ns) as admin, Producer(ns, ProducerConfig(send_timeout_ms=5000)) as p:
        await p.send(Message(topic, b"warm"))
        resp = await admin.fault_inject(broker.broker_addr, "stall_append", duration_ms=2500)
        assert resp.code == 0, resp.remark
        holder = asyncio.ensure_future(p.send_async(Message(topic, b"holds the append lock")))
        await asyncio.sleep(1.4)  # the append has held the lock past osPageCacheBusyTimeOutMills (1 s)
        outcomes = await asyncio.gather(
            *(p.send_async(Message(topic, b"x")) for _ in range(20)), return_exceptions=True
        )
        await asyncio.gather(holder, return_exceptions=True)
    kinds = Counter(o.last.kind if isinstance(o, SendFailedError) else "OK" for o in outcomes)
    busy = kinds["REJECTREQUEST"] + kinds["PCBUSY_CLEAN_QUEUE"] + kinds["PC_SYNCHRONIZED"]
    assert busy > 0, kinds


async def test_timeouts_retry_and_duplicate(broker):
    """Each attempt outlives its 0.4 s cap (the broker sleeps 0.8 s on this message): the client
    retries, every attempt is stored when the broker wakes up — three copies of one UNIQ_KEY."""
    ns = broker.namesrv
    topic = await new_topic(ns, queues=2)
    cfg = ProducerConfig(send_timeout_ms=3000, attempt_timeout_ms=400, retries=2)
    async with Producer(ns, cfg) as p:
        with pytest.raises(SendFailedError) as ei:
            await p.send(Message(topic, b"slow", properties={"brokerSleepMs": "800"}))
    assert [a.kind for a in ei.value.attempts] == ["CLIENT_TIMEOUT"] * 3
    got: list = []
    async with PushConsumer(ns, topic, fast("cg-dup"), lambda m, mq: got.append(m)):
        await wait_for(lambda: len(got) >= 3, timeout=20)
        await asyncio.sleep(0.5)  # and no fourth copy
    assert len({m.msg_id for m in got}) == 1 and len(got) == 3


async def test_admin_runtime_info_and_bad_fault_kind(broker):
    async with AdminClient(broker.namesrv) as admin:
        info = await admin.runtime_info(broker.broker_addr)
        assert "brokerVersion" in info
        with pytest.raises(AdminError) as refused:
            await admin.fault_inject(broker.broker_addr, "no_such_fault", duration_ms=10)
        assert refused.value.code not in (None, 0) and "no_such_fault" in (refused.value.remark or "")


async def test_unreachable_name_server_is_named():
    addr = f"127.0.0.1:{free_port()}"
    async with AdminClient(addr, timeout_s=1.0) as admin:
        with pytest.raises(NameServerUnreachableError, match=addr.replace(".", r"\.")):
            await admin.ping_namesrv()
    async with Producer(addr) as p:
        with pytest.raises(SendFailedError, match="no name server answered"):
            await p.send(Message("T", b"x"))
