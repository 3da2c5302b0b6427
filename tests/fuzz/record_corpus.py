"""Record the fuzz corpus: the frames real clients send, captured by a small proxy in front of our broker.

    python tests/fuzz/record_corpus.py [--out tests/fuzz/corpus]

Run once by hand (the files it writes are committed as data); the fuzz test only reads them. It starts a
broker subprocess, puts a recording proxy in front of its name server port and its broker port, and drives
the proxies with real clients: the C++ wheel (sync, oneway and orderly sends, a push consumer, an orderly
push consumer, a pull consumer) and, when Node.js is there, ali-ons (produce and consume, a SQL92
subscription). Every client-to-server byte is appended to ``<client>_<port>.frames`` (``namesrv`` or
``broker``): the raw stream, so a ``FrameDecoder`` splits it back into frames.

The proxy rewrites the broker's address in the name server's answers (``127.0.0.1:<broker port>`` becomes
``127.0.0.1:<proxy port>``; the two ports have the same number of digits, so no frame changes length), so
that clients reach the broker through the proxy too. Nothing is fetched from anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "compat"))
sys.path.insert(0, str(HERE.parents[1]))

from compat_support import (  # noqa: E402
    BrokerProcess,
    Collector,
    cpp_producer,
    cpp_pull_all,
    cpp_push_consumer,
    make_message,
    node_missing_reason,
    run_ons,
    unique,
)

from broker.testing.ports import free_port  # noqa: E402
from remoting.frame import FrameDecoder  # noqa: E402


class RecordingProxy:
    """Forwards one listening port to another; appends client bytes to the current ``sink`` file."""

    def __init__(self, listen_port: int, upstream_port: int, rewrite: tuple[bytes, bytes] | None = None) -> None:
        self.listen_port, self.upstream_port, self.rewrite = listen_port, upstream_port, rewrite
        self.sink: Path | None = None
        self.frames = 0

    async def serve(self) -> asyncio.base_events.Server:
        return await asyncio.start_server(self._client, "127.0.0.1", self.listen_port)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        await asyncio.gather(
            self._pump(reader, up_writer, record=True),
            self._pump(up_reader, writer, record=False),
            return_exceptions=True,
        )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, record: bool) -> None:
        decoder = FrameDecoder()
        try:
            while chunk := await reader.read(1 << 16):
                for frame in decoder.feed(chunk):
                    data = len(frame).to_bytes(4, "big") + bytes(frame)
                    if record and self.sink is not None:
                        with open(self.sink, "ab") as f:
                            f.write(data)
                        self.frames += 1
                    if not record and self.rewrite is not None:
                        data = data.replace(*self.rewrite)
                    writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


def _same_width_port(port: int) -> int:
    while True:
        candidate = free_port()
        if len(str(candidate)) == len(str(port)):
            return candidate


def record(out: Path) -> dict[str, int]:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="record-corpus-") as tmp:
        broker = BrokerProcess(Path(tmp) / "store", log_path=Path(tmp) / "broker.log")
        broker.start()
        namesrv_port = broker.namesrv_port
        proxy_broker_port = _same_width_port(broker.listen_port)
        rewrite = (f"127.0.0.1:{broker.listen_port}".encode(), f"127.0.0.1:{proxy_broker_port}".encode())
        ns_proxy = RecordingProxy(free_port(avoid=[proxy_broker_port]), namesrv_port, rewrite)
        broker_proxy = RecordingProxy(proxy_broker_port, broker.listen_port)
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def serve() -> None:
            await ns_proxy.serve()
            await broker_proxy.serve()
            ready.set()

        thread = threading.Thread(target=lambda: (loop.run_until_complete(serve()), loop.run_forever()), daemon=True)
        thread.start()
        ready.wait(10)
        namesrv = f"127.0.0.1:{ns_proxy.listen_port}"
        counts: dict[str, int] = {}
        try:
            for client, drive in (("cpp", _drive_cpp), ("ons", _drive_ons)):
                for name, proxy in (("namesrv", ns_proxy), ("broker", broker_proxy)):
                    proxy.sink = out / f"{client}_{name}.frames"
                    proxy.sink.write_bytes(b"")
                before = ns_proxy.frames + broker_proxy.frames
                skipped = drive(namesrv)
                time.sleep(1.0)
                counts[client] = ns_proxy.frames + broker_proxy.frames - before
                if skipped:
                    print(f"{client}: skipped ({skipped})")
                    for name in ("namesrv", "broker"):
                        (out / f"{client}_{name}.frames").unlink(missing_ok=True)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            broker.stop(check=False)
            broker.kill()
    return counts


def _drive_cpp(namesrv: str) -> str | None:
    topic, group = unique("CorpusCpp"), unique("CorpusCppG")
    keys = [f"k{i}" for i in range(6)]
    with cpp_producer(namesrv, timeout_ms=10_000) as producer:
        for i, key in enumerate(keys):
            msg = make_message(
                topic,
                f"corpus body {i}".encode(),
                key=key,
                tags="TagA" if i % 2 else "TagB",
                props={"userKey": f"v{i}"},
                delay_level=1 if i == 5 else None,
            )
            if i == 4:
                producer.send_oneway(msg)
            else:
                producer.send_sync(msg)
        producer.send_orderly(make_message(topic, b"orderly", key="o1"), 1)
        producer.send_batch([make_message(topic, f"batch {i}".encode(), key=f"b{i}") for i in range(3)])
        # a batch over 4 KiB: the C++ client zlib-compresses it (sysFlag COMPRESSED, issue 13 item 7)
        try:
            producer.send_batch([make_message(topic, b"compressible batch body " * 20, key=f"z{i}") for i in range(12)])
        except Exception as exc:  # noqa: BLE001 - only the frame matters here, not whether this build accepts it
            print(f"compressed batch refused: {exc}")
    collector = Collector()
    with cpp_push_consumer(namesrv, group, {topic: "TagA || TagB"}, collector):
        collector.wait_keys(keys[:5], 20)
    with cpp_push_consumer(namesrv, unique("CorpusCppOrderly"), {topic: "*"}, Collector(), orderly=True):
        time.sleep(3)
    cpp_pull_all(namesrv, unique("CorpusCppPull"), topic)
    return None


def _drive_ons(namesrv: str) -> str | None:
    reason = node_missing_reason()
    if reason:
        return reason
    topic = unique("CorpusOns")
    run = run_ons(
        {
            "nameSrv": namesrv,
            "mode": "both",
            "topic": topic,
            "group": unique("CorpusOnsG"),
            "messages": [{"body_b64": "b25zIGJvZHk=", "tags": "TagA", "keys": ["ons-k"], "props": {"a": "7"}}],
            "idleMs": 500,
        }
    )
    if run.rc != 0:
        return f"ali-ons run failed: {run.describe()[:500]}"
    run_ons(
        {
            "nameSrv": namesrv,
            "mode": "consume",
            "topic": topic,
            "group": unique("CorpusOnsSql"),
            "sql": "a > 5",
            "expect": 1,
            "idleMs": 200,
            "timeoutMs": 8000,
        }
    )
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "corpus")
    args = ap.parse_args()
    counts = record(args.out)
    print(json.dumps({"frames_by_client": counts, "files": sorted(p.name for p in args.out.glob("*.frames"))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
