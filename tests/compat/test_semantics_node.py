"""Consumer semantics with the real Node.js client (ali-ons 3.12): SQL92, its retry action, its
send-back fallback (a send to %RETRY%<group> itself), dead letters, a bad selector, broadcasting.

One node process runs the whole scenario (starting clients is the slow part) and prints JSON events;
the tests assert on them. The broker uses short delay levels so every retry waits 1 s.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from compat_support import NODE_DIR, BrokerFactory, run_events, unique

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import PullMessageRequestHeader, encode_header
from store.message import decode_records

pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("node_ready")]

SCENARIO_JS = r"""
'use strict';
const httpclient = require('urllib');
const { Producer, Consumer, Message } = require('ali-ons');
const args = JSON.parse(process.argv[2]);
const emit = (event, fields) => process.stdout.write(JSON.stringify(Object.assign({ event }, fields)) + '\n');
const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const common = { httpclient, nameSrv: args.nameSrv, accessKeyId: 'ak', accessKeySecret: 'sk', logger: quiet };
const sleep = ms => new Promise(r => setTimeout(r, ms));

function consumer(group, extra) {
  const c = new Consumer(Object.assign({}, common, { consumerGroup: group, rebalanceInterval: 2000,
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' }, extra || {}));
  c.on('error', err => emit('client_error', { group, code: err.code, name: err.name,
    message: String(err.message).slice(0, 600) }));
  return c;
}

async function main() {
  const producer = new Producer(Object.assign({}, common, { producerGroup: 'PG_semantics' }));
  await producer.ready();
  const send = async (topic, key, props, tags) => {
    const msg = new Message(topic, tags || null, Buffer.from('body-' + key));
    msg.keys = [ key ];
    Object.assign(msg.properties, props || {});
    const r = await producer.send(msg);
    emit('sent', { topic, key, msgId: r.msgId });
  };
  // SQL92 topic: only a > 5 AND region IN ('eu', 'us') AND tier IS NOT NULL may arrive
  for (const [key, props] of [
    [ 'match-1', { a: '7', region: 'eu', tier: 'gold' } ], [ 'match-2', { a: '100', region: 'us', tier: 'x' } ],
    [ 'low', { a: '5', region: 'eu', tier: 'gold' } ], [ 'asia', { a: '9', region: 'asia', tier: 'gold' } ],
    [ 'no-tier', { a: '9', region: 'eu' } ], [ 'no-a', { region: 'eu', tier: 'gold' } ],
    [ 'not-a-number', { a: 'seven', region: 'eu', tier: 'gold' } ],
    [ 'retry-once', { a: '6', region: 'us', tier: 't' } ], [ 'always-fail', { a: '6', region: 'us', tier: 't' } ],
  ]) await send(args.sqlTopic, key, props);
  // what ali-ons' fallback sends when CONSUMER_SEND_MSG_BACK fails: the message itself to %RETRY%<group>
  const retryTopic = '%RETRY%' + args.sqlGroup;
  await send(retryTopic, 'fallback-ok', { RETRY_TOPIC: args.sqlTopic, ORIGIN_MESSAGE_ID: 'ORIGIN-OK',
    RECONSUME_TIME: '1', MAX_RECONSUME_TIMES: '3', a: '6', region: 'us', tier: 't' });
  await send(retryTopic, 'fallback-dead', { RETRY_TOPIC: args.sqlTopic, ORIGIN_MESSAGE_ID: 'ORIGIN-DEAD',
    RECONSUME_TIME: '3', MAX_RECONSUME_TIMES: '3', a: '6', region: 'us', tier: 't' });
  for (let i = 0; i < 6; i++) await send(args.bcTopic, 'bc-' + i, {});

  const sql = consumer(args.sqlGroup, { maxReconsumeTimes: 1 });
  const attempts = {};
  sql.subscribe(args.sqlTopic, { expressionType: 'SQL92', subString: args.sql }, async msg => {
    const key = msg.keys;
    attempts[key] = (attempts[key] || 0) + 1;
    emit('received', { group: 'sql', topic: msg.topic, key, reconsumeTimes: msg.reconsumeTimes,
      props: msg.properties, at: Date.now() });
    // ali-ons' two ways to ask for a retry: return ACTION_RETRY, or throw. (Its handler for messages
    // coming back through %RETRY% ignores ACTION_RETRY, so failing a retried message means throwing.)
    if (key === 'retry-once' && attempts[key] === 1) return Consumer.ACTION_RETRY;
    if (key === 'always-fail') throw new Error('consume failed on purpose');
  });
  const bad = consumer(args.badGroup);
  bad.subscribe(args.sqlTopic, { expressionType: 'SQL92', subString: args.badSql }, async msg => {
    emit('received', { group: 'bad', key: msg.keys });
  });
  const bc = [ 'bc1', 'bc2' ].map(name => {
    // a second client instance: ali-ons shares one client per instance name and one consumer per group in it
    const c = consumer(args.bcGroup, { isBroadcast: true, instanceName: name });
    c.subscribe(args.bcTopic, '*', async msg => emit('received', { group: name, key: msg.keys }));
    return c;
  });
  await Promise.all([ sql.ready(), bad.ready(), ...bc.map(c => c.ready()) ]);
  emit('ready', {});
  await sleep(args.runMs);
  // one shared client instance underneath: close one by one, and a socket closing under a late
  // request while shutting down is not a failure of the scenario
  for (const c of [ sql, bad, ...bc, producer ]) {
    try { await c.close(); } catch (err) { emit('close_error', { message: err.message }); }
  }
  emit('done', {});
}
main().then(() => process.exit(0), err => { emit('fatal', { message: err.message, stack: err.stack }); process.exit(1); });
"""


@pytest.fixture(scope="module")
def node_run(tmp_path_factory, node_ready):
    factory = BrokerFactory(tmp_path_factory.mktemp("semantics_node"))
    try:
        broker = factory.start("messageDelayLevel=1s 1s 1s 1s 1s 1s 1s", "enablePropertyFilter=true", name="sem_node")
        args = {
            "nameSrv": broker.namesrv_addr,
            "sqlTopic": unique("T_sql"),
            "sqlGroup": unique("CG_sql"),
            "sql": "a > 5 AND region IN ('eu', 'us') AND tier IS NOT NULL",
            "badGroup": unique("CG_bad"),
            "badSql": "a > AND region = 'eu'",
            "bcTopic": unique("T_bc"),
            "bcGroup": unique("CG_bc"),
            "runMs": 4000,
        }
        run, events = run_events(
            ["node", "-", json.dumps(args)], what="node scenario", timeout_s=60, cwd=NODE_DIR, input=SCENARIO_JS
        )
        assert run.returncode == 0 and any(e["event"] == "done" for e in events), (
            f"node scenario failed rc={run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        )
        dlq = _raw_pull_all(broker.broker_addr, f"%DLQ%{args['sqlGroup']}")
        yield args, events, dlq
    finally:
        factory.close()


def _raw_pull_all(broker_addr: str, topic: str) -> list:
    """Every message of queue 0 of ``topic``, by plain PULL_MESSAGE requests (the DLQ has one queue)."""

    async def go() -> list:
        client = RemotingClient()
        out, offset = [], 0
        try:
            while True:
                header = PullMessageRequestHeader(
                    consumer_group="semantics_probe",
                    topic=topic,
                    queue_id=0,
                    queue_offset=offset,
                    max_msg_nums=32,
                    sys_flag=0x4,
                    commit_offset=0,
                    suspend_timeout_millis=0,
                    sub_version=0,
                    subscription="*",
                    expression_type="TAG",
                )
                resp = await client.invoke(
                    broker_addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header)), 5.0
                )
                if resp.code != ResponseCode.SUCCESS:
                    return out
                out += decode_records(resp.body)
                offset = int(resp.ext_fields["nextBeginOffset"])
        finally:
            await client.close()

    return asyncio.run(go())


def _received(events: list[dict], group: str) -> list[dict]:
    return [e for e in events if e["event"] == "received" and e["group"] == group]


def test_sql92_filter_delivers_exactly_the_matching_messages(node_run):
    _, events, _ = node_run
    keys = {e["key"] for e in _received(events, "sql")}
    assert keys == {"match-1", "match-2", "retry-once", "always-fail", "fallback-ok"}, keys


def test_retry_action_redelivers_through_the_retry_topic(node_run):
    args, events, _ = node_run
    got = [e for e in _received(events, "sql") if e["key"] == "retry-once"]
    assert [e["reconsumeTimes"] for e in got] == [0, 1]
    assert got[1]["topic"] == args["sqlTopic"] and got[1]["props"]["RETRY_TOPIC"] == args["sqlTopic"]
    assert got[1]["props"].get("ORIGIN_MESSAGE_ID")
    assert 900 <= got[1]["at"] - got[0]["at"] < 4000, "a retry waits its delay level (3 + reconsumeTimes = 1 s)"


def test_retries_beyond_max_reconsume_times_go_to_the_dlq(node_run):
    args, events, dlq = node_run
    got = [e for e in _received(events, "sql") if e["key"] == "always-fail"]
    assert [e["reconsumeTimes"] for e in got] == [0, 1], "maxReconsumeTimes=1 (sent in the send-back header)"
    dead = {m.properties["KEYS"]: m for m in dlq}
    assert set(dead) == {"always-fail", "fallback-dead"}, sorted(dead)
    assert dead["always-fail"].reconsume_times == 2
    assert dead["always-fail"].properties["RETRY_TOPIC"] == args["sqlTopic"]


def test_fallback_send_to_the_retry_topic_works(node_run):
    args, events, dlq = node_run
    (ok,) = [e for e in _received(events, "sql") if e["key"] == "fallback-ok"]
    assert ok["topic"] == args["sqlTopic"] and ok["reconsumeTimes"] == 1
    assert ok["props"]["ORIGIN_MESSAGE_ID"] == "ORIGIN-OK"
    dead = [m for m in dlq if m.properties["KEYS"] == "fallback-dead"]
    assert dead and dead[0].reconsume_times == 3 and dead[0].properties["ORIGIN_MESSAGE_ID"] == "ORIGIN-DEAD"


def test_bad_selector_is_refused_with_subscription_parse_failed(node_run):
    args, events, _ = node_run
    assert not _received(events, "bad")
    errors = [e for e in events if e["event"] == "client_error" and e["group"] == args["badGroup"]]
    assert errors, "the consumer with a bad SQL92 expression saw no error"
    assert any(
        e.get("code") == 23 and "Invalid MessageSelector" in e["message"] and "column" in e["message"] for e in errors
    ), errors[:3]


def test_broadcasting_consumers_each_get_every_message(node_run):
    _, events, _ = node_run
    wanted = {f"bc-{i}" for i in range(6)}
    for name in ("bc1", "bc2"):
        keys = [e["key"] for e in _received(events, name)]
        assert sorted(keys) == sorted(wanted), (name, keys)
