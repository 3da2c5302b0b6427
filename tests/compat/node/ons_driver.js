'use strict';
/*
 * Drives mini-rocketmq with the real Node.js client (ali-ons) for tests/compat/test_node_client.py.
 *
 * Usage: node ons_driver.js '<json>'   or   node ons_driver.js - < args.json
 *
 * Args (JSON object):
 *   nameSrv        "127.0.0.1:9876" (required)
 *   mode           "produce" | "consume" | "both" (produce everything, then consume)
 *   topic          topic name (required)
 *   producerGroup  producer group (default "PG_ons_driver")
 *   group          consumer group (consume/both)
 *   messages       [{body_b64, tags?, keys?: [..], props?: {k: v}}] to send, in order
 *   count          when `messages` is absent: send `count` generated text bodies "ons-<i>"
 *   tags           tags for generated messages
 *   subExpression  consumer tag expression ("*", "TagA || TagB"); default "*"
 *   sql            SQL92 expression; when set it replaces subExpression
 *   expect         how many messages the consumer waits for (default: number sent in mode both)
 *   idleMs         after `expect` arrived, keep listening this long to catch extras (default 500)
 *   timeoutMs      give up consuming after this long (default 20000); exit code 2
 *   isBroadcast    broadcasting consumer (default false)
 *   consumeFromWhere  default "CONSUME_FROM_FIRST_OFFSET"
 *   maxMessageSize    producer option (ali-ons does not enforce it; kept for completeness)
 *   accessKey, secretKey  credentials ali-ons signs with (default: dummies, which a broker without ACL ignores)
 *
 * Output: one JSON object per line on stdout, each with an "event" field:
 *   ready {role}, sent {index, msgId, queueId, queueOffset, status}, send_error {index, name, code, message},
 *   received {topic, queueId, queueOffset, msgId, tags, keys, props, reconsumeTimes, body_b64},
 *   client_error {message}, done {sent, sendErrors, received, timedOut}
 * ali-ons' own log lines go to stderr. Exit code: 0 ok, 1 fatal error, 2 consume timeout.
 */

const fs = require('fs');
const httpclient = require('urllib');
const { Producer, Consumer, Message } = require('ali-ons');

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields)) + '\n');
}

// ali-ons logs through this object; stdout is reserved for events.
const verbose = !!process.env.ONS_DRIVER_VERBOSE;
const logger = {
  debug(...a) { if (verbose) console.error('[ons debug]', ...a); },
  info(...a) { if (verbose) console.error('[ons info]', ...a); },
  warn(...a) { console.error('[ons warn]', ...a); },
  error(...a) { console.error('[ons error]', ...a); },
};

function readArgs() {
  const raw = process.argv[2];
  if (!raw) throw new Error('usage: node ons_driver.js <json>|-');
  return JSON.parse(raw === '-' ? fs.readFileSync(0, 'utf8') : raw);
}

function commonOptions(args) {
  return {
    httpclient, // required by ali-ons even when nameSrv is given
    nameSrv: args.nameSrv,
    // ali-ons signs every request; the broker ignores signatures while ACL is off.
    accessKeyId: args.accessKey || 'compat-dummy-ak',
    accessKeySecret: args.secretKey || 'compat-dummy-sk',
    logger,
  };
}

function buildMessages(args) {
  if (Array.isArray(args.messages)) {
    return args.messages.map(m => {
      const msg = new Message(args.topic, m.tags || null, Buffer.from(m.body_b64, 'base64'));
      if (m.keys && m.keys.length) msg.keys = m.keys;
      for (const [k, v] of Object.entries(m.props || {})) msg.properties[k] = String(v);
      return msg;
    });
  }
  const out = [];
  for (let i = 0; i < (args.count || 0); i++) {
    out.push(new Message(args.topic, args.tags || null, Buffer.from(`ons-${i}`)));
  }
  return out;
}

async function produce(args) {
  const producer = new Producer(Object.assign(commonOptions(args), {
    producerGroup: args.producerGroup || 'PG_ons_driver',
    maxMessageSize: args.maxMessageSize || 1024 * 1024 * 4,
  }));
  producer.on('error', err => emit('client_error', { role: 'producer', message: String(err.message).slice(0, 2000) }));
  await producer.ready();
  emit('ready', { role: 'producer' });
  const msgs = buildMessages(args);
  let sent = 0;
  let sendErrors = 0;
  for (let i = 0; i < msgs.length; i++) {
    try {
      const r = await producer.send(msgs[i]);
      sent++;
      emit('sent', {
        index: i, msgId: r.msgId, status: r.sendStatus,
        // the send response header is strings: ali-ons keeps queueId as the string it got
        queueId: r.messageQueue && Number(r.messageQueue.queueId), queueOffset: r.queueOffset,
      });
    } catch (err) {
      sendErrors++;
      emit('send_error', { index: i, name: err.name, code: err.code, message: err.message });
    }
  }
  await producer.close();
  return { sent, sendErrors };
}

async function consume(args, defaultExpect) {
  const expect = args.expect !== undefined ? args.expect : defaultExpect;
  const timeoutMs = args.timeoutMs || 20000;
  const idleMs = args.idleMs !== undefined ? args.idleMs : 500;
  const consumer = new Consumer(Object.assign(commonOptions(args), {
    consumerGroup: args.group,
    isBroadcast: !!args.isBroadcast,
    consumeFromWhere: args.consumeFromWhere || 'CONSUME_FROM_FIRST_OFFSET',
    // Keep timers short so a test does not wait for ali-ons' 10 s rebalance.
    rebalanceInterval: 2000,
  }));
  consumer.on('error', err => emit('client_error', { role: 'consumer', message: String(err.message).slice(0, 2000) }));

  let received = 0;
  let reached;
  const reachedPromise = new Promise(resolve => { reached = resolve; });
  const expression = args.sql ? { expressionType: 'SQL92', subString: args.sql } : (args.subExpression || '*');
  consumer.subscribe(args.topic, expression, async msg => {
    received++;
    emit('received', {
      topic: msg.topic, queueId: msg.queueId, queueOffset: Number(msg.queueOffset), msgId: msg.msgId,
      tags: msg.tags || null, keys: msg.keys || null, props: msg.properties,
      reconsumeTimes: msg.reconsumeTimes, body_b64: Buffer.from(msg.body || []).toString('base64'),
    });
    if (received >= expect) reached();
  });
  await consumer.ready();
  emit('ready', { role: 'consumer' });

  let timedOut = false;
  if (expect > 0) {
    const timer = new Promise(resolve => setTimeout(() => { timedOut = true; resolve(); }, timeoutMs));
    await Promise.race([ reachedPromise, timer ]);
  }
  if (!timedOut) await new Promise(resolve => setTimeout(resolve, idleMs));
  await consumer.close();
  return { received, timedOut };
}

async function main() {
  const args = readArgs();
  const mode = args.mode || 'both';
  if (!args.nameSrv || !args.topic) throw new Error('nameSrv and topic are required');
  let result = { sent: 0, sendErrors: 0, received: 0, timedOut: false };
  if (mode === 'produce' || mode === 'both') {
    Object.assign(result, await produce(args));
  }
  if (mode === 'consume' || mode === 'both') {
    if (!args.group) throw new Error('group is required to consume');
    Object.assign(result, await consume(args, result.sent));
  }
  emit('done', result);
  return result.timedOut ? 2 : 0;
}

main().then(
  code => process.exit(code),
  err => {
    emit('fatal', { name: err.name, message: err.message, stack: err.stack });
    process.exit(1);
  }
);
