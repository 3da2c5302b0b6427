"""``broker.deferred_import``: a deferred module runs once, at its first use, whichever thread comes first; and the
broker's start keeps numpy off the path to its ports (issue 15) while the first message still gets it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker.deferred_import import DeferredModule, defer, is_deferred
from broker.testing.process import BrokerProcess
from mqclient import AdminClient, Message, Producer, ProducerConfig

ROOT = Path(__file__).resolve().parents[2]
NUMPY_EXTENSION = "_multiarray_umath"  # numpy's core C extension: mapped into a process once numpy is imported

PACKAGE_INIT = """
import time
with open(__file__ + ".runs", "a") as f:
    f.write("x")
time.sleep(0.2)  # long enough for the other threads to arrive while it runs
from {name}.sub import VALUE
"""


@pytest.fixture
def slow_package(tmp_path, monkeypatch):
    """A package whose ``__init__`` counts its runs and takes 0.2 s; removed from sys.modules afterwards."""
    name = f"deferred_probe_{time.monotonic_ns()}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(PACKAGE_INIT.format(name=name), encoding="utf-8")
    (pkg / "sub.py").write_text(f"import {name}\nVALUE = 42\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, pkg / "__init__.py.runs"
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def test_import_binds_without_running_and_the_first_lookup_runs_it_once(slow_package):
    name, runs = slow_package
    assert defer(name) and is_deferred(name)
    module = __import__(name)  # what ``import name`` in another module does
    assert isinstance(module, DeferredModule) and not runs.exists()
    assert module.VALUE == 42 and runs.read_text() == "x"
    assert type(module) is not DeferredModule and not is_deferred(name)
    assert __import__(f"{name}.sub").sub.VALUE == 42 and runs.read_text() == "x"
    assert not defer(name)  # already imported: nothing changes


def test_threads_arriving_during_the_import_wait_for_it(slow_package):
    name, runs = slow_package
    defer(name)
    module = __import__(name)
    start = threading.Barrier(8)
    seen: list[object] = []

    def use() -> None:
        start.wait()
        seen.append(module.VALUE)  # AttributeError here if a thread saw the module half built

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [42] * 8
    assert runs.read_text() == "x"


def test_a_failing_import_raises_at_the_use_and_stays_deferred(tmp_path, monkeypatch):
    name = f"deferred_broken_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text("raise RuntimeError('broken on purpose')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        defer(name)
        module = sys.modules[name]
        for _ in range(2):
            with pytest.raises(RuntimeError, match="broken on purpose"):
                module.anything  # noqa: B018
        assert is_deferred(name)
    finally:
        sys.modules.pop(name, None)


def test_unknown_or_submodule_names_are_left_alone():
    assert not defer("no_such_module_anywhere_42")
    assert not defer("os.path")
    assert "no_such_module_anywhere_42" not in sys.modules


def test_the_modules_a_start_imports_leave_numpy_deferred():
    """Every module on the path to the ports (broker.main's deferral first, then what it imports): a module-level
    numpy use (a dtype, a table) brings numpy's import back onto the start path and fails this, and so does an
    eager import of the whole client package."""
    code = (
        "import sys\n"
        "from broker import main\n"
        "for name in main.DEFERRED_IMPORTS: main.defer(name)\n"
        "import mqclient.cli_support, broker.controller, proxy.server\n"
        "from broker.deferred_import import is_deferred\n"
        "print(is_deferred('numpy'), sorted(m for m in sys.modules if m.startswith('mqclient')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True, timeout=60)
    # and of our client, mqbroker needs only its command-line manners (mqclient's __init__ imports lazily)
    assert out.stdout.split() == ["True", "['mqclient',", "'mqclient.cli_support']"], out.stderr[-2000:]


def numpy_mapped(pid: int) -> bool:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
        return NUMPY_EXTENSION in f.read()


async def send_and_stats(broker: BrokerProcess) -> tuple[str, int]:
    async with Producer(broker.namesrv_addr, ProducerConfig(group="PG_deferred")) as producer:
        result = await producer.send(Message("TopicDeferred", b"first message", tags="A", keys="k1"))
    async with AdminClient(broker.namesrv_addr) as admin:
        for _ in range(100):  # the dispatch to the consume queue follows the append
            stats = await admin.topic_stats(broker.broker_addr, "TopicDeferred")
            if stats.get(result.queue, {}).get("maxOffset", 0) == 1:
                break
            await asyncio.sleep(0.05)
        return result.status, stats[result.queue]["maxOffset"]


def test_a_broker_opens_its_ports_without_numpy_and_imports_it_for_the_first_message(tmp_path):
    broker = BrokerProcess(tmp_path / "store", config={"mappedFileSizeCommitLog": 4 * 1024 * 1024}, grpc_port=0)
    broker.start()
    try:
        assert broker.proc is not None
        time.sleep(0.5)  # idle after the start: nothing imported numpy
        assert not numpy_mapped(broker.proc.pid)
        assert asyncio.run(send_and_stats(broker)) == ("SEND_OK", 1)
        assert numpy_mapped(broker.proc.pid)
    finally:
        broker.stop(check=True)


FIRST_SEND = """
import asyncio, struct, sys
from pathlib import Path
sys.path.insert(0, "tests/broker")
from broker import main
for name in main.DEFERRED_IMPORTS:
    main.defer(name)
from broker_helpers import send_request, start_broker
from broker.deferred_import import is_deferred
from remoting.command import RemotingCommand

async def run(root):
    broker = await start_broker(root)
    broker.first_client_warmup.on_client = lambda: None  # (a raw SEND never starts it; be sure)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.server.port)
        props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "0A0B0C0D00002A9F0000000000000001"}
        request = send_request("TopicFirst", b"first message", props=props)
        request.opaque = 1
        writer.write(request.to_bytes())
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        code = RemotingCommand.decode(memoryview(await reader.readexactly(length))).code
        writer.close()
        store = broker.store
        for _ in range(200):  # dispatched: in its consume queue and its index
            if store.get_max_offset_in_queue("TopicFirst", 0) == 1 and not store.dispatcher._index_keys:
                break
            await asyncio.sleep(0.01)
        found = store.query_message("TopicFirst", "k2", 10, 0, 2**62)
        answer = code if found.message_count == 1 else -1  # -1: its keys were not indexed
        result = (answer, store.get_max_offset_in_queue("TopicFirst", 0), is_deferred("numpy"))
        print("FIRST SEND", *result, file=sys.stderr)
    finally:
        await broker.shutdown()

asyncio.run(run(Path(sys.argv[1])))
"""


def test_a_first_send_is_stored_and_dispatched_without_numpy(tmp_path):
    """A fresh broker's first send (append, consume queue entry, index keys) does not need numpy, so a client that
    sends right after its route request does not wait for the warm-up thread's import of it (~0.1-0.3 s of CPU):
    the index of its few keys went through ``isinstance(values, np.ndarray)``, which imported numpy on the loop."""
    out = subprocess.run(
        [sys.executable, "-c", FIRST_SEND, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = [line.split()[2:] for line in out.stderr.splitlines() if line.startswith("FIRST SEND")]
    # answered SUCCESS, in its consume queue and index, and numpy still not imported
    assert seen == [["0", "1", "True"]], (out.stdout[-2000:], out.stderr[-2000:])
