"""Load with the official RocketMQ 5.x Python client (rocketmq-python-client), for ``bench.grpc_figures --client
official``. Runs in the client's own venv (``.venv-grpc-client``, see tests/compat/grpc_support.py), never imports
our packages, and prints its figures as one JSON line.

    python grpc_official_load.py producer ENDPOINT TOPIC SECONDS SENDERS
    python grpc_official_load.py consumer ENDPOINT TOPIC SECONDS GROUP EXPECT_FILE

producer: ``SENDERS`` threads sending 1 KiB messages synchronously through one Producer for ``SECONDS``.
consumer: a PushConsumer (20 consumption threads, its defaults) for ``SECONDS``, then until the count written
to ``EXPECT_FILE`` was received (at most 60 s more).
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
)

SENT_AT = "sentAtNs"


def config(endpoint):
    return ClientConfiguration(endpoint, Credentials("", ""), request_timeout=10)


def produce(endpoint, topic, seconds, senders):
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    out = {"sent": 0, "failed": 0, "send_ms": [], "errors": {}}
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def sender():
        while time.monotonic() < end:
            msg = Message()
            msg.topic = topic
            msg.body = b"x" * 1024
            began = time.time_ns()
            msg.add_property(SENT_AT, str(began))
            try:
                producer.send(msg)
                kind = ""
            except Exception as exc:  # noqa: BLE001 - counted by kind
                kind = type(exc).__name__
            with lock:
                out["send_ms"].append((time.time_ns() - began) / 1e6)
                out["failed" if kind else "sent"] += 1
                if kind:
                    out["errors"][kind] = out["errors"].get(kind, 0) + 1

    threads = [threading.Thread(target=sender) for _ in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.shutdown()
    return out


class Recorder(MessageListener):
    def __init__(self):
        self.lock = threading.Lock()
        self.received = 0
        self.e2e_ms = []

    def consume(self, message):
        at = time.time_ns()
        with self.lock:
            self.received += 1
            self.e2e_ms.append((at - int(message.properties[SENT_AT])) / 1e6)
        return ConsumeResult.SUCCESS


def consume(endpoint, topic, seconds, group, expect_file):
    recorder = Recorder()
    consumer = PushConsumer(config(endpoint), group, recorder, {topic: FilterExpression("*")})
    consumer.startup()
    time.sleep(seconds)
    in_load = recorder.received
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up:
        if os.path.exists(expect_file) and os.path.getsize(expect_file):
            if recorder.received >= int(open(expect_file).read()):
                break
        time.sleep(0.1)
    time.sleep(0.5)  # the last acks
    consumer.shutdown()
    return {"received": recorder.received, "received_in_load": in_load, "e2e_ms": recorder.e2e_ms}


if __name__ == "__main__":
    role, endpoint, topic, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    if role == "producer":
        result = produce(endpoint, topic, seconds, int(sys.argv[5]))
    else:
        result = consume(endpoint, topic, seconds, sys.argv[5], sys.argv[6])
    result["cpu_s"] = time.process_time()
    print(json.dumps(result), flush=True)
    os._exit(0)  # the client leaves non-daemon threads behind
