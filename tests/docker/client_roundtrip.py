"""Drive a broker with the real C++ client (PyPI ``rocketmq`` 0.4.4): produce, or pull back, one run's messages.

Used by ``scripts/container_test.sh`` against the broker in a container, from the host's venv:

    python tests/docker/client_roundtrip.py produce --namesrv 127.0.0.1:9876 --topic T --run-id R --count 20
    python tests/docker/client_roundtrip.py consume --namesrv 127.0.0.1:9876 --topic T --run-id R --count 20

``consume`` pulls every queue of the topic from offset 0 with a fresh group and succeeds once all
``count`` bodies of this run were seen (so it also proves they survived a broker restart). Both print
one JSON line with what they did and exit non-zero with a one-line reason on failure; every wait is
bounded by ``--deadline``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _body(run_id: str, i: int) -> str:
    return f"{run_id}:{i}"


def produce(namesrv: str, topic: str, run_id: str, count: int, deadline_s: float) -> dict:
    from rocketmq.client import Message, Producer, SendStatus

    producer = Producer(f"PG_{run_id}")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    sent: list[str] = []
    try:
        end = time.monotonic() + deadline_s
        i = 0
        while i < count:
            msg = Message(topic)
            msg.set_keys(f"{run_id}-{i}")
            msg.set_tags("container-test")
            msg.set_body(_body(run_id, i))
            try:
                result = producer.send_sync(msg)
            except Exception as exc:  # the first send can race the topic's route creation
                if time.monotonic() > end:
                    raise SystemExit(f"send {i} failed until the deadline: {exc}") from exc
                time.sleep(0.5)
                continue
            if result.status != SendStatus.OK:
                raise SystemExit(f"send {i} returned status {result.status!r}")
            sent.append(result.msg_id)
            i += 1
    finally:
        producer.shutdown()
    return {"produced": len(sent), "first_msg_id": sent[0] if sent else None}


def _pull_queue(consumer, mq, offset: int, end: float) -> tuple[list[str], int, str]:
    """Pull one queue from ``offset`` until NO_NEW_MSG; (bodies, next offset, last status name).

    Calls the library's ``Pull`` directly: the wheel's ``PullConsumer.pull`` generator spins forever
    when pulls fail (a NULL result keeps the offset), which would hang this process.
    """
    import ctypes

    from rocketmq.client import RecvMessage, dll
    from rocketmq.ffi import _CPullStatus

    bodies: list[str] = []
    status = "none"
    while time.monotonic() < end:
        result = dll.Pull(consumer._handle, ctypes.pointer(mq), b"*", ctypes.c_longlong(offset), 32)
        try:
            status = _CPullStatus(result.pullStatus).name if result.pullStatus in range(5) else str(result.pullStatus)
            if result.pullStatus == _CPullStatus.FOUND:
                for i in range(int(result.size)):
                    body = RecvMessage(result.msgFoundList[i]).body
                    bodies.append(body.decode() if isinstance(body, bytes) else str(body))
            if result.pullStatus != _CPullStatus.BROKER_TIMEOUT and result.nextBeginOffset > offset:
                offset = result.nextBeginOffset
            elif result.pullStatus == _CPullStatus.NO_NEW_MSG:
                return bodies, offset, status
            else:
                time.sleep(0.2)  # an error: the broker's answer is in the C++ client's log
        finally:
            dll.ReleasePullResult(result)
    return bodies, offset, status


def consume(namesrv: str, topic: str, run_id: str, count: int, deadline_s: float) -> dict:
    import ctypes

    from rocketmq.client import PullConsumer, dll
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import _CMessageQueue

    consumer = PullConsumer(f"CG_{run_id}_{int(time.time())}")
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    expected = {_body(run_id, i) for i in range(count)}
    seen: set[str] = set()
    offsets: dict[int, int] = {}
    statuses: dict[int, str] = {}
    end = time.monotonic() + deadline_s
    try:
        while seen != expected:
            queues = ctypes.POINTER(_CMessageQueue)()
            n = ctypes.c_int()
            try:
                ffi_check(
                    dll.FetchSubscriptionMessageQueues(
                        consumer._handle, topic.encode(), ctypes.pointer(queues), ctypes.pointer(n)
                    )
                )
            except Exception as exc:  # no route yet, right after a restart
                if time.monotonic() > end:
                    raise SystemExit(f"no queues for {topic} before the deadline: {exc}") from exc
                time.sleep(0.5)
                continue
            try:
                for q in range(n.value):
                    mq = queues[q]
                    bodies, offsets[mq.queueId], status = _pull_queue(consumer, mq, offsets.get(mq.queueId, 0), end)
                    if status != "none":
                        statuses[mq.queueId] = status
                    seen.update(b for b in bodies if b in expected)
            finally:
                ffi_check(dll.ReleaseSubscriptionMessageQueue(queues))
            if seen != expected:
                if time.monotonic() > end:
                    raise SystemExit(
                        f"pulled {len(seen)} of {count} messages before the deadline; "
                        f"last pull status per queue: {statuses}"
                    )
                time.sleep(0.5)
    finally:
        consumer.shutdown()
    return {"consumed": len(seen), "queues": len(offsets)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("produce", "consume"))
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds (default 60)")
    args = parser.parse_args(argv)
    action = produce if args.action == "produce" else consume
    started = time.monotonic()
    summary = action(args.namesrv, args.topic, args.run_id, args.count, args.deadline)
    summary.update(action=args.action, seconds=round(time.monotonic() - started, 2))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
