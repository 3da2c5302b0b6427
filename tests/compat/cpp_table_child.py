"""Child process for test_cpp_lifecycle: put librocketmq's factory table into the state a lost concurrent
insert leaves (its size one above its tree), then start another client.

Usage: python cpp_table_child.py guarded|raw
  guarded: the start goes through bench.cpp_lifecycle.start_client; prints {"refused": "..."}, repairs the
           size, starts again and prints {"started_after_repair": true}.
  raw:     calls Producer.start() directly: librocketmq dies with SIGSEGV (that is what killed pytest).
A separate process, because the raw case crashes by design.
"""

from __future__ import annotations

import ctypes
import json
import resource
import sys
import uuid


def new_producer():
    from rocketmq.client import Producer
    from rocketmq.ffi import dll

    producer = Producer(f"PG_table_{uuid.uuid4().hex[:8]}")
    dll.SetProducerInstanceName(producer._handle, uuid.uuid4().hex[:10].encode())
    producer.set_namesrv_addr("127.0.0.1:9")  # a start does not connect; nothing listens there
    return producer


def table_size() -> ctypes.c_size_t:
    from rocketmq.ffi import dll

    from bench.cpp_lifecycle import _MAP_COUNT

    get_instance = dll._ZN8rocketmq15MQClientManager11getInstanceEv
    get_instance.restype, get_instance.argtypes = ctypes.c_void_p, []
    return ctypes.c_size_t.from_address(get_instance() + _MAP_COUNT)


def main() -> int:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the raw case crashes on purpose: leave no core file
    from bench.cpp_lifecycle import FactoryTableCorrupted, read_factory_table, shutdown_client, start_client

    first = new_producer()
    start_client(first)
    table_size().value += 1  # as when two threads' inserts both counted but only one node stayed in the tree
    shutdown_client(first)  # erases the one real node: the tree is empty, the size says 1
    second = new_producer()
    if sys.argv[1] == "raw":
        second.start()
        print(json.dumps({"started": True}), flush=True)
        return 0
    try:
        start_client(second)
    except FactoryTableCorrupted as exc:
        print(json.dumps({"refused": str(exc), "table": repr(read_factory_table())}), flush=True)
    table_size().value -= 1
    start_client(second)
    shutdown_client(second)
    print(json.dumps({"started_after_repair": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
