"""A driver for the official RocketMQ 5.x Python client (PyPI rocketmq-python-client), run in its own venv.

Invoked by tests/compat/test_grpc_client.py as a subprocess: ``client.py ENDPOINT ACTION JSON-ARGS``; it
prints one JSON line per event so that the test reads results without importing the client (whose
import name ``rocketmq`` is also the 4.x C++ wheel's).
"""

import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType

_EMIT_LOCK = threading.Lock()  # the push consumer calls listeners on several threads


def emit(**event):
    line = json.dumps(event)
    with _EMIT_LOCK:
        print(line, flush=True)


def config(endpoint):
    # ACL accounts by environment (empty: the client's "no credentials", which still sends an authorization)
    credentials = Credentials(os.environ.get("GRPC_CLIENT_AK", ""), os.environ.get("GRPC_CLIENT_SK", ""))
    return ClientConfiguration(endpoint, credentials, request_timeout=10)


def tls():
    return os.environ.get("GRPC_CLIENT_TLS", "0") == "1"


def produce(endpoint, args):
    producer = Producer(config(endpoint), (args["topic"],), tls_enable=tls())
    try:
        producer.startup()
    except Exception as e:  # noqa: BLE001 - e.g. a plaintext client against a TLS endpoint
        emit(event="startup_failed", error=str(e))
        return
    try:
        for i in range(args.get("count", 1)):
            msg = Message()
            msg.topic = args["topic"]
            msg.body = (args.get("body", "hello-{i}")).format(i=i).encode()
            if args.get("tag"):
                msg.tag = args["tag"]
            for key in args.get("keys") or ():
                msg.keys = key  # the setter adds one key per assignment
            if args.get("group"):
                msg.message_group = args["group"]
            if args.get("delay_s"):
                msg.delivery_timestamp = int(time.time()) + args["delay_s"]
            for k, v in (args.get("properties") or {}).items():
                msg.add_property(k, v)
            try:
                receipt = producer.send(msg)
                emit(
                    event="sent",
                    message_id=receipt.message_id,
                    body=msg.body.decode(),
                    at=time.time(),
                    due=msg.delivery_timestamp,
                )
            except Exception as e:  # noqa: BLE001 - report it to the test
                emit(event="send_failed", error=str(e))
    finally:
        producer.shutdown()


class Checker(TransactionChecker):
    def __init__(self, resolution):
        self.resolution = resolution
        self.checked = threading.Event()

    def check(self, message):
        emit(event="checked", message_id=message.message_id, body=message.body.decode())
        self.checked.set()
        return self.resolution


def transaction(endpoint, args):
    resolution = {"commit": TransactionResolution.COMMIT, "rollback": TransactionResolution.ROLLBACK}
    checker = Checker(resolution[args.get("check", "commit")])
    producer = Producer(config(endpoint), (args["topic"],), checker, tls_enable=tls())
    producer.startup()
    try:
        tx = producer.begin_transaction()
        msg = Message()
        msg.topic = args["topic"]
        msg.body = args.get("body", "tx").encode()
        receipt = producer.send(msg, tx)
        emit(event="sent", message_id=receipt.message_id)
        end = args.get("end", "commit")
        if end == "commit":
            tx.commit()
        elif end == "rollback":
            tx.rollback()
        emit(event="ended", how=end)
        # linger_s: how long to wait for the broker's check-back; once it came, a moment for the answer to go out
        if checker.checked.wait(args.get("linger_s", 0)):
            time.sleep(args.get("after_check_s", 1.0))
    finally:
        producer.shutdown()


def consume(endpoint, args):
    """Receive until `count` messages were acked or `timeout_s` passed; optional nack/change-invisible plans.

    Two earlier ends for tests that expect nothing more to come: `quiet_after` (after that many deliveries,
    keep receiving only `quiet_s` longer) and `max_failures` (stop after that many failed receives).
    """
    if args.get("sql"):
        expression = FilterExpression(args["sql"], FilterType.SQL)
    else:
        expression = FilterExpression(args.get("tag", "*"))
    consumer = SimpleConsumer(
        config(endpoint),
        args["group"],
        {args["topic"]: expression},
        await_duration=args.get("await_s", 2),
        tls_enable=tls(),
    )
    try:
        consumer.startup()
    except Exception as e:  # noqa: BLE001 - e.g. refused by ACL
        emit(event="startup_failed", error=str(e))
        return
    acked = 0
    deadline = time.time() + args.get("timeout_s", 20)
    skip_ack = args.get("skip_ack", 0)  # the first N deliveries are not acked (redelivery tests)
    change_s = args.get("change_invisible_s")
    received, failures = 0, 0
    try:
        while acked < args.get("count", 1) and time.time() < deadline:
            try:
                messages = consumer.receive(args.get("batch", 16), args.get("invisible_s", 15))
            except Exception as e:  # noqa: BLE001
                emit(event="receive_failed", error=str(e))
                failures += 1
                if failures >= args.get("max_failures", float("inf")):
                    break
                time.sleep(0.2)
                continue
            for m in messages:
                received += 1
                if received == args.get("quiet_after"):
                    deadline = min(deadline, time.time() + args["quiet_s"])
                emit(
                    event="received",
                    message_id=m.message_id,
                    body=m.body.decode(),
                    attempt=m.delivery_attempt,
                    tag=m.tag,
                    keys=sorted(m.keys or []),
                    group=m.message_group,
                    properties=dict(m.properties or {}),
                    at=time.time(),
                )
                if skip_ack > 0:
                    skip_ack -= 1
                    if change_s is not None:
                        consumer.change_invisible_duration(m, change_s)
                        emit(event="changed", message_id=m.message_id)
                    continue
                consumer.ack(m)
                acked += 1
                emit(event="acked", message_id=m.message_id)
    finally:
        consumer.shutdown()


class Listener(MessageListener):
    """Fails the first `fail_first` deliveries of each message, succeeds afterwards."""

    def __init__(self, fail_first, want):
        self.fail_first = fail_first
        self.want = want
        self.succeeded = set()
        self.done = threading.Event()
        self.lock = threading.Lock()

    def consume(self, message):
        ok = message.delivery_attempt > self.fail_first
        emit(
            event="received",
            message_id=message.message_id,
            body=message.body.decode(),
            attempt=message.delivery_attempt,
            at=time.time(),
            ok=ok,
        )
        if not ok:
            return ConsumeResult.FAILURE
        with self.lock:
            self.succeeded.add(message.message_id)
            if len(self.succeeded) >= self.want:
                self.done.set()
        return ConsumeResult.SUCCESS


def push(endpoint, args):
    listener = Listener(args.get("fail_first", 0), args.get("count", 1))
    consumer = PushConsumer(
        config(endpoint), args["group"], listener, {args["topic"]: FilterExpression("*")}, tls_enable=tls()
    )
    consumer.startup()
    try:
        listener.done.wait(args.get("timeout_s", 20))
        time.sleep(0.5)  # let the last ack go out
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    endpoint, action, raw = sys.argv[1], sys.argv[2], sys.argv[3]
    {"produce": produce, "consume": consume, "transaction": transaction, "push": push}[action](
        endpoint, json.loads(raw)
    )
    emit(event="done")
    os._exit(0)  # the client leaves non-daemon threads behind
