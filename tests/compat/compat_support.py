"""Plumbing for the real-client acceptance tests: the broker subprocess, C++ wheel wrappers, the ali-ons driver.

Everything here talks to mini-rocketmq only through a real client (the `rocketmq` 0.4.4 wheel's
librocketmq.so or the npm `ali-ons` package) or through the broker's process boundary (stdout, exit code,
files in its store directory).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cpp_lifecycle import shutdown_client, start_client
from broker.testing import process
from broker.testing.process import ChildError, set_args

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPAT_DIR = Path(__file__).resolve().parent
NODE_DIR = COMPAT_DIR / "node"

#: Extra broker arguments for debugging a failing run, e.g. COMPAT_BROKER_ARGS="--set maxMessageSize=8192".
#: (The broker's own log level comes from MINI_ROCKETMQ_LOG_LEVEL, which the subprocess inherits.)
BROKER_ARGS_ENV = "COMPAT_BROKER_ARGS"
#: C++ client log level for the clients these helpers create: 1 FATAL .. 4 INFO (default) .. 5 DEBUG, 6 TRACE.
#: At DEBUG the client logs every remoting command it sends and receives (~/logs/rocketmq-cpp/<pid>_*).
CPP_LOG_LEVEL_ENV = "COMPAT_CPP_LOG_LEVEL"


# ------------------------------------------------------------------------------------------- broker


@dataclass
class BrokerProcess(process.BrokerProcess):
    """The test launcher's broker (``broker.testing.process``) as the compat tests run it: a stop must exit 0,
    and ``COMPAT_BROKER_ARGS`` comes last on the command line."""

    check_exit: bool = field(default=True, kw_only=True)

    def command(self) -> list[str]:
        return [*super().command(), *shlex.split(os.environ.get(BROKER_ARGS_ENV, ""))]


def stop_brokers(brokers: Iterable[process.ChildProcess]) -> None:
    """Graceful stops first (each must exit 0); anything left is killed. One AssertionError names every
    broker that did not stop cleanly."""
    errors = []
    for broker in brokers:
        try:
            broker.stop(check=True)
        except ChildError as e:
            errors.append(str(e))
        finally:
            broker.kill()
    if errors:
        raise AssertionError("\n\n".join(errors))


def create_topic(
    broker: process.BrokerProcess,
    topic: str,
    message_type: str,
    queues: int = 4,
    *,
    credentials: tuple[str, str] | None = None,
) -> None:
    """``mqadmin updateTopic`` (a child process, as an operator runs it) with 5.x's message.type attribute;
    ``credentials`` (access key, secret key) sign it for a broker with ACL."""
    signed = ["--ak", credentials[0], "--sk", credentials[1]] if credentials else []
    run = subprocess.run(
        [sys.executable, "-m", "mqclient.mqadmin", "updateTopic", *signed, "-n", broker.namesrv_addr]
        + ["-b", broker.broker_addr, "-t", topic, "-r", str(queues), "-w", str(queues)]
        + ["-a", f"+message.type={message_type}"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def read_consumer_offsets(store_dir: Path) -> dict[str, dict[int, int]]:
    """`<store>/config/consumerOffset.json` as {"topic@group": {queue_id: offset}}.

    J writes it with fastjson, whose integer map keys are unquoted (`{0:12}`); quote them before json.loads.
    """
    path = store_dir / "config" / "consumerOffset.json"
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"([{,]\s*)(-?\d+)(\s*:)", r'\1"\2"\3', text)
    table = json.loads(text)["offsetTable"]
    return {key: {int(q): int(off) for q, off in queues.items()} for key, queues in table.items()}


# ---------------------------------------------------------------------------------------- bodies


def nul_free_body(size: int, seed: str = "") -> bytes:
    """Incompressible bytes without NUL: the wheel passes bodies through C strings (strlen on send and receive)."""
    prefix = seed.encode()[:size]
    return prefix + os.urandom(size - len(prefix)).replace(b"\0", b"\x01")


def compressible_body(size: int, seed: str) -> bytes:
    unit = f"mini-rocketmq compat body {seed} ".encode()
    return (unit * (size // len(unit) + 1))[:size]


# ------------------------------------------------------------------------------- C++ wheel clients


#: The Apache RocketMQ 4.9.7 Java client: ``rmqjava SOURCE.java ARGS`` runs one of ``java/*.java`` on its jars.
RMQJAVA = shutil.which("rmqjava") or "/root/.cache/apache-rocketmq-4.9.7/bin/rmqjava"
JAVA_DIR = COMPAT_DIR / "java"
JAVA_MISSING = "the Apache RocketMQ 4.9.7 Java client (rmqjava) is not installed"


def java_client_missing() -> bool:
    return not os.access(RMQJAVA, os.X_OK)


def run_java_source(source: str, args: list[str], timeout_s: float, serialize: str | None = None) -> list[dict]:
    """``java/<source>`` through rmqjava (``-Drocketmq.serialize.type=`` when ``serialize`` is given): the JSON
    events it printed, one a line. It must exit 0 with a last event "done"; else the assertion shows the end of
    its output."""
    cmd = [RMQJAVA] + ([f"-Drocketmq.serialize.type={serialize}"] if serialize else []) + [str(JAVA_DIR / source)]
    proc = subprocess.run(cmd + args, capture_output=True, text=True, timeout=timeout_s, check=False)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and events and events[-1]["event"] == "done", proc.stdout[-2000:] + proc.stderr[-2000:]
    return events


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _call_within(fn: Callable[[], object], timeout_s: float, what: str) -> None:
    """Run a native call that has been seen to hang (client shutdown) on a helper thread with a deadline."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(e)

    t = threading.Thread(target=run, name=f"compat-{what}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise AssertionError(
            f"{what} did not return within {timeout_s:.0f} s (see ~/logs/rocketmq-cpp/{os.getpid()}_*)"
        )
    if errors:
        raise errors[0]


@dataclass
class Received:
    """What a C++ consumer callback saw, copied out of the native message before the callback returns."""

    consumer: str
    topic: str
    key: str
    tags: str
    body: bytes
    msg_id: str
    queue_id: int
    queue_offset: int
    store_size: int
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int
    props: dict[str, str]
    at: float


class Collector:
    """Thread-safe sink for consumer callbacks that run on the C++ client's native threads."""

    def __init__(self, props: Iterable[str] = ()) -> None:
        self._cond = threading.Condition()
        self._items: list[Received] = []
        self._props = tuple(props)
        self.errors: list[str] = []

    def callback(self, consumer: str) -> Callable[[Any], None]:
        def on_message(msg: Any) -> None:
            # Never raise: the wheel turns an exception into RECONSUME_LATER, which would hide the bug as a retry.
            try:
                item = Received(
                    consumer=consumer,
                    topic=msg.topic,
                    key=_text(msg.keys),
                    tags=_text(msg.tags),
                    body=msg.body or b"",
                    msg_id=msg.id,
                    queue_id=msg.queue_id,
                    queue_offset=msg.queue_offset,
                    store_size=msg.store_size,
                    born_timestamp=msg.born_timestamp,
                    store_timestamp=msg.store_timestamp,
                    reconsume_times=msg.reconsume_times,
                    props={p: _text(msg.get_property(p)) for p in self._props},
                    at=time.monotonic(),
                )
            except Exception as e:  # noqa: BLE001
                with self._cond:
                    self.errors.append(f"{consumer}: {type(e).__name__}: {e}")
                    self._cond.notify_all()
                return
            with self._cond:
                self._items.append(item)
                self._cond.notify_all()

        return on_message

    def items(self) -> list[Received]:
        with self._cond:
            return list(self._items)

    def wait_until(self, predicate: Callable[[list[Received]], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate(self._items):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wait_keys(self, keys: Iterable[str], timeout_s: float, consumer: str | None = None) -> bool:
        wanted = set(keys)
        return self.wait_until(
            lambda items: wanted <= {i.key for i in items if consumer is None or i.consumer == consumer}, timeout_s
        )

    def settle(self, quiet_s: float = 1.0) -> None:
        """Let duplicates that are already in flight arrive: wait until nothing new came for `quiet_s`."""
        deadline = time.monotonic() + 5 * quiet_s
        seen = len(self.items())
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            now = len(self.items())
            if now == seen:
                return
            seen = now


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def counts_by_key(items: Iterable[Received]) -> Counter[str]:
    return Counter(i.key for i in items)


def describe_missing(expected: Iterable[str], items: list[Received]) -> str:
    got = counts_by_key(items)
    missing = [k for k in expected if k not in got]
    dups = dict(list({k: n for k, n in got.items() if n > 1}.items())[:10])
    return f"received {len(items)} messages; missing {len(missing)}: {missing[:10]}; duplicated: {dups}"


def make_message(
    topic: str,
    body: bytes,
    *,
    key: str | None = None,
    tags: str | None = None,
    props: dict[str, str] | None = None,
    delay_level: int | None = None,
) -> Any:
    from rocketmq.client import Message

    assert b"\0" not in body, "the wheel's set_body/GetMessageBody stop at NUL; use NUL-free bodies"
    msg = Message(topic)
    if key is not None:
        msg.set_keys(key)
    if tags is not None:
        msg.set_tags(tags)
    for k, v in (props or {}).items():
        msg.set_property(k, v)
    if delay_level is not None:
        msg.set_delay_time_level(delay_level)
    msg.set_body(body)
    return msg


@contextlib.contextmanager
def cpp_producer(
    namesrv: str,
    group: str | None = None,
    *,
    timeout_ms: int | None = None,
    max_message_size: int | None = None,
    credentials: tuple[str, str] | None = None,
) -> Iterator[Any]:
    """A started wheel `Producer` with its own client instance (so its own MQClientFactory and timers);
    `credentials` (access key, secret key) make it sign every request (ACL)."""
    from rocketmq.client import Producer
    from rocketmq.ffi import dll

    producer = Producer(group or unique("PG"), timeout=timeout_ms, max_message_size=max_message_size)
    # The C++ client shares one MQClientFactory per "pid-ip@instanceName"; a factory outlives a test while any
    # client uses it and keeps the first broker's routes. A unique instance name isolates each client.
    dll.SetProducerInstanceName(producer._handle, unique("p").encode())
    if os.environ.get(CPP_LOG_LEVEL_ENV):
        dll.SetProducerLogLevel(producer._handle, int(os.environ[CPP_LOG_LEVEL_ENV]))
    producer.set_namesrv_addr(namesrv)
    if credentials is not None:
        producer.set_session_credentials(credentials[0], credentials[1], "")
    start_client(producer)  # one start/shutdown at a time per process: see bench/cpp_lifecycle.py
    try:
        _connect(producer)
        yield producer
    finally:
        _call_within(lambda: shutdown_client(producer), 15, "Producer.shutdown()")


#: Topic of the producers' first (connecting) message; no test consumes it.
WARMUP_TOPIC = "COMPAT_WARMUP"


def _connect(producer: Any, attempts: int = 5) -> None:
    """Send one message to WARMUP_TOPIC, retrying a few times, so the producer's broker connection exists.

    The C++ client's first send to a broker it just learned from a route can lose a race with its own
    connect: while another client thread's connect to that address is pending, TcpRemotingClient::
    CreateTransport returns null at once, and the send's 5 retries (no back-off) all fail within a
    millisecond ("No route info of this topic"). Only this connecting send is retried; later sends reuse
    the connection and are checked strictly.
    """
    from rocketmq.exceptions import ProducerSendSyncFailed

    error: Exception | None = None
    for _ in range(attempts):
        try:
            producer.send_sync(make_message(WARMUP_TOPIC, b"warm-up"))
            return
        except ProducerSendSyncFailed as e:
            error = e
            time.sleep(0.2)
    raise AssertionError(f"a C++ producer could not send its first message in {attempts} tries: {error}")


@contextlib.contextmanager
def cpp_push_consumer(
    namesrv: str,
    group: str,
    subscriptions: dict[str, str],
    collector: Collector,
    *,
    name: str = "c1",
    orderly: bool = False,
    broadcasting: bool = False,
    credentials: tuple[str, str] | None = None,
) -> Iterator[Any]:
    """A started wheel `PushConsumer` whose callback feeds `collector`, with a unique client instance name
    (`credentials`: access key, secret key to sign with).

    A unique instance also matters for two consumers of one group in one process: the C++ client refuses a
    second consumer of a group in the same factory, and rebalances immediately only once per factory.
    """
    from rocketmq.client import PushConsumer
    from rocketmq.ffi import MessageModel

    model = MessageModel.BROADCASTING if broadcasting else MessageModel.CLUSTERING
    consumer = PushConsumer(group, orderly=orderly, message_model=model)
    consumer.set_instance_name(unique(name))
    if os.environ.get(CPP_LOG_LEVEL_ENV):
        from rocketmq.ffi import dll

        dll.SetPushConsumerLogLevel(consumer._handle, int(os.environ[CPP_LOG_LEVEL_ENV]))
    consumer.set_namesrv_addr(namesrv)
    if credentials is not None:
        consumer.set_session_credentials(credentials[0], credentials[1], "")
    callback = collector.callback(name)
    for topic, expression in subscriptions.items():
        consumer.subscribe(topic, callback, expression)
    start_client(consumer)
    try:
        yield consumer
    finally:
        _call_within(lambda: shutdown_client(consumer), 20, "PushConsumer.shutdown()")


class CppClientLog:
    """This process's C++ client log (~/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.N), read from a mark on."""

    def __init__(self) -> None:
        self.dir = Path(os.path.expanduser("~")) / "logs" / "rocketmq-cpp"
        self._marks: dict[Path, int] = {}

    def files(self) -> list[Path]:
        return sorted(self.dir.glob(f"{os.getpid()}_rocketmq-cpp.log.*"), key=lambda p: p.stat().st_mtime)

    def mark(self) -> None:
        self._marks = {p: p.stat().st_size for p in self.files()}

    def since_mark(self) -> str:
        out = []
        for p in self.files():
            with open(p, "rb") as f:
                f.seek(self._marks.get(p, 0))
                out.append(f.read().decode("utf-8", "replace"))
        return "".join(out)

    def tail(self, lines: int = 40) -> str:
        text = self.since_mark().splitlines()[-lines:]
        return f"--- C++ client log since mark (last {len(text)} lines) ---\n" + "\n".join(text)


PULL_CHILD = COMPAT_DIR / "cpp_pull_child.py"


# ------------------------------------------------------------------------------- client drivers


def run_events(
    argv: list[str],
    *,
    what: str,
    timeout_s: float,
    cwd: Path,
    input: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """Run a client driver that prints one JSON object a line (C++ pull child, ali-ons, the 5.x client) and parse
    them; a line that is not JSON becomes ``{"event": "garbage", "line": ...}``. A driver still running after
    ``timeout_s`` fails the test with what it printed so far."""
    try:
        run = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=env, check=False
        )
    except subprocess.TimeoutExpired as e:
        out, err = _text(e.stdout), _text(e.stderr)
        raise AssertionError(
            f"{what} did not finish within {timeout_s:.0f} s; partial output:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
        ) from None
    events = []
    for line in run.stdout.splitlines():
        try:
            event = json.loads(line) if line.startswith("{") else None
        except ValueError:
            event = None
        events.append(event if isinstance(event, dict) else {"event": "garbage", "line": line})
    return run, events


def cpp_pull_all(namesrv: str, group: str, topic: str, expression: str = "*", timeout_s: float = 20.0) -> dict:
    """Drain `topic` with the wheel's `PullConsumer.pull` generator in a child process; returns its JSON events.

    A child process because the wheel's generator loops forever while pulls fail (it keeps the offset on
    BROKER_TIMEOUT), and only a process can be killed.
    """
    args = json.dumps({"namesrv": namesrv, "group": group, "topic": topic, "expression": expression})
    run, events = run_events(
        [sys.executable, str(PULL_CHILD), args],
        what="PullConsumer.pull (the wheel spins while pulls fail)",
        timeout_s=timeout_s,
        cwd=REPO_ROOT,
    )
    done = [e for e in events if e.get("event") == "done"]
    assert run.returncode == 0 and done, (
        f"pull child failed rc={run.returncode}\nstdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-3000:]}"
    )
    return {"messages": [e for e in events if e.get("event") == "message"], "done": done[0]}


# --------------------------------------------------------------------------------------- ali-ons


@dataclass
class OnsRun:
    rc: int
    events: list[dict]
    stderr: str

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == kind]

    def describe(self) -> str:
        lines = [json.dumps(e)[:300] for e in self.events if e.get("event") != "received"]
        return (
            f"ons_driver rc={self.rc}, {len(self.of('received'))} received; events:\n"
            + "\n".join(lines[-40:])
            + f"\nstderr (tail):\n{self.stderr[-2000:]}"
        )


def node_missing_reason() -> str | None:
    import shutil

    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed; the ali-ons compatibility tests need Node.js and npm"
    return None


def ensure_node_modules() -> None:
    """`npm ci` in tests/compat/node unless ali-ons is already installed there."""
    if (NODE_DIR / "node_modules" / "ali-ons" / "package.json").exists():
        return
    run = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, f"npm ci in {NODE_DIR} failed:\n{run.stdout}\n{run.stderr}"


def run_ons(args: dict, timeout_s: float = 40.0) -> OnsRun:
    """Run ons_driver.js with `args` (JSON on stdin) and parse its JSON-lines events."""
    run, events = run_events(
        ["node", "ons_driver.js", "-"], what="ons_driver.js", timeout_s=timeout_s, cwd=NODE_DIR, input=json.dumps(args)
    )
    return OnsRun(run.returncode, events, run.stderr)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


class BrokerFactory:
    """Starts brokers in one temp directory; every one it started is stopped at teardown."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.brokers: list[BrokerProcess] = []

    def start(self, *settings: str, name: str | None = None, **options: Any) -> BrokerProcess:
        """`settings` are "key=value" strings, passed as `--set key=value`; `options` are BrokerProcess fields
        (`grpc_port=0` for a 5.x endpoint on a free port)."""
        name = name or f"b{len(self.brokers)}"
        broker = BrokerProcess(
            self.root / name / "store", log_path=self.root / f"{name}.log", extra_args=set_args(*settings), **options
        )
        self.brokers.append(broker)
        broker.start()
        return broker

    def close(self) -> None:
        stop_brokers(self.brokers)
