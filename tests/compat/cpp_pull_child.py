"""Child process for the compat tests: drain one topic with the C++ wheel's `PullConsumer.pull` generator.

Usage: python cpp_pull_child.py '{"namesrv": "127.0.0.1:N", "group": "G", "topic": "T", "expression": "*"}'
Prints one JSON line per message ({"event": "message", ...}), then
{"event": "done", "next_offsets": {queue_id: offset}}.
It is a separate process so the parent can kill it: the wheel's generator never returns while pulls fail.
"""

from __future__ import annotations

import base64
import json
import sys


def main() -> int:
    from rocketmq.client import PullConsumer

    args = json.loads(sys.argv[1])
    consumer = PullConsumer(args["group"])
    # The wheel keeps pull offsets in a class attribute shared by every PullConsumer; give this one its own.
    consumer.offset_table = {}
    consumer.set_namesrv_addr(args["namesrv"])
    consumer.start()
    try:
        for msg in consumer.pull(args["topic"], args.get("expression", "*"), args.get("max_num", 32)):
            event = {
                "event": "message",
                "topic": msg.topic,
                "key": (msg.keys or b"").decode(),
                "tags": (msg.tags or b"").decode(),
                "msg_id": msg.id,
                "queue_id": msg.queue_id,
                "queue_offset": msg.queue_offset,
                "store_size": msg.store_size,
                "body_b64": base64.b64encode(msg.body or b"").decode(),
            }
            print(json.dumps(event), flush=True)
        # offset_table keys are "<topic>@<queueId>" (the topic as the bytes repr); report {queueId: nextOffset}.
        offsets = {key.rsplit("@", 1)[1]: offset for key, offset in consumer.offset_table.items()}
        print(json.dumps({"event": "done", "next_offsets": offsets}), flush=True)
    finally:
        consumer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
