"""The 5.x gRPC path under load, printed as figures; this tree against a baseline revision, interleaved in one run.

    python -m bench.grpc_figures [--seconds 15] [--senders 16] [--rate 0] [--rounds 2] [--baseline-rev main] [--ack batch|each]
                                 [--client stubs|official]

Per round and per tree (this one, then ``--baseline-rev`` extracted with ``git archive``), a fresh broker
(bench/broker_proc.py of that tree, so it runs that tree's code) on free loopback ports, plaintext gRPC, and
in this process, over one grpc.aio channel as the official clients use:

- ``--senders`` tasks sending 1 KiB messages synchronously (SendMessage, one message each) for ``--seconds``;
- one consumer as the 5.x PushConsumer works: one ReceiveMessage (batch 32, long polling) in flight at a time,
  and each message acknowledged by its own AckMessage (``--ack each``, at most 20 in flight, the push
  consumer's consumption threads) or one AckMessage per batch (``--ack batch``, as SimpleConsumer users may).

``--client official`` drives the same load with the official 5.x Python client instead (its Producer from
``--senders`` threads, its PushConsumer; bench/grpc_official_load.py, run in ``.venv-grpc-client``).

Printed per tree: send TPS, send latency p50/p99, receive TPS, end-to-end (send call to receipt) p50/p99, the
backlog (sent - received) at the end of the load, and the broker's CPU seconds per 1000 messages (less noisy
than rates on a shared machine). Ratios this/baseline from the medians of the rounds close the output.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BODY = b"x" * 1024
SENT_AT = "sentAtNs"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def extract(rev: str, into: Path) -> Path:
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def broker_process_class(root: Path):
    """``BrokerProcess`` of the tree at ``root``: it starts ``broker.main`` with cwd and PYTHONPATH = root."""
    spec = importlib.util.spec_from_file_location(f"broker_proc_{abs(hash(root))}", root / "bench" / "broker_proc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.BrokerProcess


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@dataclass
class Figures:
    sent: int = 0
    failed: int = 0
    received: int = 0
    send_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    backlog: int = 0
    received_in_load: int = 0
    receive_ms: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    seconds: float = 0.0
    broker_cpu_s: float = 0.0
    producer_cpu_s: float = 0.0
    consumer_cpu_s: float = 0.0

    def row(self) -> dict[str, float]:
        return {
            "send TPS": self.sent / self.seconds,
            "send p50 ms": pct(self.send_ms, 0.5),
            "send p99 ms": pct(self.send_ms, 0.99),
            "recv TPS": self.received_in_load / self.seconds,
            "receive p50 ms": pct(self.receive_ms, 0.5),
            "msgs/receive": statistics.mean(self.batch_sizes) if self.batch_sizes else 0.0,
            "e2e p50 ms": pct(self.e2e_ms, 0.5),
            "e2e p99 ms": pct(self.e2e_ms, 0.99),
            "backlog": float(self.backlog),
            "CPU s/1k msg": 1000 * self.broker_cpu_s / max(1, self.sent + self.received),
            "producer CPU %": 100 * self.producer_cpu_s / self.seconds,
            "consumer CPU %": 100 * self.consumer_cpu_s / self.seconds,
            "failed": float(self.failed),
        }


META = (("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))


async def produce(endpoint: str, topic: str, seconds: float, senders: int, rate: float = 0) -> dict:
    """``senders`` tasks over one channel, each sending 1 KiB messages synchronously for ``seconds``; at most
    ``rate`` messages a second in all when ``rate`` is set."""
    import grpc

    from proxy.protocol import definition_pb2 as pb
    from proxy.protocol import service_pb2 as spb
    from proxy.protocol.service_pb2_grpc import MessagingServiceStub

    meta = (("x-mq-client-id", f"grpc-figures-producer-{os.getpid()}"), *META)
    out: dict = {"sent": 0, "failed": 0, "send_ms": [], "errors": {}, "remarks": {}}
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = MessagingServiceStub(channel)
        end = time.monotonic() + seconds

        async def sender() -> None:
            start, sent = time.monotonic(), 0
            while time.monotonic() < end:
                if rate:
                    ahead = start + sent * senders / rate - time.monotonic()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                    sent += 1
                msg = pb.Message(topic=pb.Resource(name=topic), body=BODY)
                msg.system_properties.message_id = uuid.uuid4().hex.upper()
                msg.system_properties.message_type = pb.NORMAL
                msg.system_properties.body_encoding = pb.IDENTITY
                began = time.time_ns()
                msg.user_properties[SENT_AT] = str(began)
                try:
                    response = await stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=meta, timeout=10)
                    kind = "" if response.status.code == pb.OK else pb.Code.Name(response.status.code)
                    remark = response.status.message
                except grpc.aio.AioRpcError as exc:
                    kind, remark = exc.code().name, exc.details() or ""
                out["send_ms"].append((time.time_ns() - began) / 1e6)
                out["failed" if kind else "sent"] += 1
                if kind:
                    out["errors"][kind] = out["errors"].get(kind, 0) + 1
                    out["remarks"].setdefault(kind, remark[:200])

        await asyncio.gather(*(sender() for _ in range(senders)))
    return out


async def consume(endpoint: str, topic: str, group: str, seconds: float, ack_mode: str, expect_file: str) -> dict:
    """As a 5.x push consumer: per assigned queue one receive (batch 32) in flight; acks; for ``seconds``, then
    until the count in ``expect_file`` was received."""
    import grpc
    from google.protobuf.duration_pb2 import Duration

    from proxy.protocol import definition_pb2 as pb
    from proxy.protocol import service_pb2 as spb
    from proxy.protocol.service_pb2_grpc import MessagingServiceStub

    meta = (("x-mq-client-id", f"grpc-figures-consumer-{os.getpid()}"), *META)
    out: dict = {"received": 0, "received_in_load": 0, "e2e_ms": [], "receive_ms": [], "batch": []}
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = MessagingServiceStub(channel)
        acks = asyncio.Semaphore(20)  # the push consumer's 20 consumption threads, each acking in turn
        pending: set[asyncio.Task] = set()

        async def ack(entries: list) -> None:
            async with acks:
                await stub.AckMessage(
                    spb.AckMessageRequest(
                        group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=entries
                    ),
                    metadata=meta,
                    timeout=10,
                )

        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=32,
            invisible_duration=Duration(seconds=30),
            long_polling_timeout=Duration(seconds=1),
        )
        load_end = time.monotonic() + seconds
        give_up = load_end + 60
        expected: list[int] = []

        def done() -> bool:
            if time.monotonic() < load_end:
                return False
            if not out["received_in_load"]:
                out["received_in_load"] = out["received"]
            if not expected and os.path.exists(expect_file) and os.path.getsize(expect_file):
                expected.append(int(Path(expect_file).read_text()))
            return bool(expected) and out["received"] >= expected[0] or time.monotonic() > give_up

        async def receiver(queue_id: int) -> None:
            mine = spb.ReceiveMessageRequest()
            mine.CopyFrom(request)
            mine.message_queue.id = queue_id
            while not done():
                batch = []
                began, got = time.perf_counter_ns(), 0
                async for response in stub.ReceiveMessage(mine, metadata=meta, timeout=10):
                    if not response.HasField("message"):
                        continue
                    m = response.message
                    got += 1
                    out["received"] += 1
                    out["e2e_ms"].append((time.time_ns() - int(m.user_properties[SENT_AT])) / 1e6)
                    entry = spb.AckMessageEntry(
                        message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
                    )
                    if ack_mode == "each":
                        await acks.acquire()  # a free consumption thread
                        acks.release()
                        task = asyncio.ensure_future(ack([entry]))
                        pending.add(task)
                        task.add_done_callback(pending.discard)
                    else:
                        batch.append(entry)
                out["receive_ms"].append((time.perf_counter_ns() - began) / 1e6)
                out["batch"].append(got)
                if batch:
                    await ack(batch)

        await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=meta)  # creates it
        assignments = await stub.QueryAssignment(
            spb.QueryAssignmentRequest(topic=pb.Resource(name=topic), group=pb.Resource(name=group)), metadata=meta
        )
        queue_ids = [a.message_queue.id for a in assignments.assignments] or [-1]
        out["receivers"] = len(queue_ids)
        await asyncio.gather(*(receiver(q) for q in queue_ids))
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    return out


def role_main(args: argparse.Namespace) -> int:
    """A producer or consumer process: its figures as one JSON line on stdout."""
    if args.role == "producer":
        out = asyncio.run(produce(args.endpoint, args.topic, args.seconds, args.senders, args.rate))
    else:
        out = asyncio.run(consume(args.endpoint, args.topic, args.group, args.seconds, args.ack, args.expect_file))
    out["cpu_s"] = time.process_time()
    print(json.dumps(out))
    return 0


def load(endpoint: str, args: argparse.Namespace) -> Figures:
    """Producer and consumer in processes of their own (as in production), started together."""
    topic, group = f"grpcfig-{uuid.uuid4().hex[:6]}", f"grpcfig-g-{uuid.uuid4().hex[:6]}"
    with tempfile.NamedTemporaryFile(prefix="grpcfig-expect-") as expect:
        if args.client == "official":  # the 5.x Python client's Producer and PushConsumer, in its own venv
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            script = [str(official_python()), str(REPO / "bench" / "grpc_official_load.py")]
            at = [endpoint, topic, str(args.seconds)]
            consumer = subprocess.Popen(
                [*script, "consumer", *at, group, expect.name], stdout=subprocess.PIPE, env=env, cwd="/"
            )
            time.sleep(3)  # its route, assignment and first receives
            producer = subprocess.run(
                [*script, "producer", *at, str(args.senders)], stdout=subprocess.PIPE, env=env, cwd="/", check=True
            )
        else:
            common = [sys.executable, "-m", "bench.grpc_figures", "--endpoint", endpoint, "--topic", topic]
            common += ["--seconds", str(args.seconds)]
            consumer = subprocess.Popen(
                [*common, "--role", "consumer", "--group", group, "--ack", args.ack, "--expect-file", expect.name],
                stdout=subprocess.PIPE,
                cwd=REPO,
            )
            producer = subprocess.run(
                [*common, "--role", "producer", "--senders", str(args.senders), "--rate", str(args.rate)],
                stdout=subprocess.PIPE,
                cwd=REPO,
                check=True,
            )
        sent = json.loads(producer.stdout)
        if sent["errors"]:
            print(f"  failed sends by kind: {sent['errors']} {sent.get('remarks', '')}", flush=True)
        Path(expect.name).write_text(str(sent["sent"]))
        got = json.loads(consumer.communicate(timeout=120)[0])
    return Figures(
        sent=sent["sent"],
        failed=sent["failed"],
        received=got["received"],
        received_in_load=got["received_in_load"],
        send_ms=sent["send_ms"],
        e2e_ms=got["e2e_ms"],
        receive_ms=got.get("receive_ms", []),
        batch_sizes=got.get("batch", []),
        backlog=sent["sent"] - got["received_in_load"],
        seconds=args.seconds,
        producer_cpu_s=sent["cpu_s"],
        consumer_cpu_s=got["cpu_s"],
    )


def official_python() -> Path:
    """The 5.x client's venv (built by the gRPC compatibility tests: tests/compat/grpc_support.py)."""
    venv = Path(os.environ.get("GRPC_CLIENT_VENV", REPO / ".venv-grpc-client"))
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(
            f"--client official needs the 5.x client venv at {venv}: run tests/compat/test_grpc_client.py once"
        )
    return python


def run_one(root: Path, args: argparse.Namespace) -> Figures:
    broker_process = broker_process_class(root)
    with tempfile.TemporaryDirectory(prefix="grpcfig-store-") as store:
        broker = broker_process(Path(store), config={"mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
        broker.start()
        try:
            pid = broker.proc.pid
            cpu0 = cpu_seconds(pid)
            if args.profile_pid_file:
                Path(args.profile_pid_file).write_text(str(pid))
            fig = load(broker.grpc_endpoint, args)
            fig.broker_cpu_s = cpu_seconds(pid) - cpu0
        finally:
            broker.stop()
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--senders", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0, help="msg/s over all senders (0: as fast as they go)")
    parser.add_argument("--ack", choices=("each", "batch"), default="each")
    parser.add_argument(
        "--client", choices=("stubs", "official"), default="stubs", help="our stubs, or the official 5.x client"
    )
    parser.add_argument("--baseline-rev", default="main", help="'' to measure this tree only")
    parser.add_argument("--profile-pid-file", default="", help=argparse.SUPPRESS)
    for hidden in ("--role", "--endpoint", "--topic", "--group", "--expect-file"):  # the load processes
        parser.add_argument(hidden, default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        return role_main(args)
    trees = {"this": REPO}
    with tempfile.TemporaryDirectory(prefix="grpcfig-base-") as base:
        if args.baseline_rev:
            trees[args.baseline_rev] = extract(args.baseline_rev, Path(base))
        results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for rnd in range(args.rounds):
            for name, root in trees.items():
                row = run_one(root, args).row()
                results[name].append(row)
                print(f"round {rnd + 1} {name:>8}: " + "  ".join(f"{k} {v:,.1f}" for k, v in row.items()), flush=True)
    print()
    medians = {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in results.items()}
    for name, row in medians.items():
        print(f"median {name:>8}: " + "  ".join(f"{k} {v:,.1f}" for k, v in row.items()))
    if args.baseline_rev:
        this, base_row = medians["this"], medians[args.baseline_rev]
        print(
            "ratio this/baseline: "
            + "  ".join(f"{k} {this[k] / base_row[k]:.2f}x" for k in this if base_row[k] and k != "failed")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
