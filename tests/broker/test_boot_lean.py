"""What boot leaves behind (issue 15): no grpc when the 5.x endpoint is off, boot objects frozen out of the GC."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from broker.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

# runs broker.main's run() in a child, waits for the boot line's moment (remoting port open), reports, stops
CHILD = """
import asyncio, gc, os, signal, socket, sys
from broker import main
from broker.config import load_config

config, _ = load_config(None, sys.argv[1:])

async def go():
    task = asyncio.create_task(main.run(config))
    for _ in range(200):  # 10 s; a boot that never freezes reports False
        await asyncio.sleep(0.05)
        try:
            socket.create_connection(("127.0.0.1", config.listen_port), timeout=0.2).close()
        except OSError:
            continue
        if gc.get_freeze_count():
            break
    print("FIGURES", "grpc" in sys.modules, gc.get_freeze_count() > 0, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    return await asyncio.wait_for(task, 20)

sys.exit(asyncio.run(go()))
"""


def boot(tmp_path: Path, grpc_port: int) -> list[str]:
    sets = [
        f"namesrvListenPort={free_port()}",
        f"listenPort={free_port()}",
        f"grpcServerPort={grpc_port}",
        "grpcListenHost=127.0.0.1",
        "brokerIP1=127.0.0.1",
        f"storePathRootDir={tmp_path}",
        f"mappedFileSizeCommitLog={4 * 1024 * 1024}",
    ]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *sets], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("FIGURES ")]
    assert len(lines) == 1, out.stdout
    return lines[0]


def test_grpc_is_not_imported_when_the_endpoint_is_off(tmp_path):
    assert boot(tmp_path, -1) == ["False", "True"]


def test_grpc_is_imported_when_the_endpoint_is_on(tmp_path):
    assert boot(tmp_path, free_port()) == ["True", "True"]


# runs mqbroker's main() in a child and counts the collections that ran after main() was entered: the collector is
# off until the ports are open, then main collects once (generation 2) and turns it back on
COLLECTIONS = """
import gc, os, signal, sys, threading
from broker import main

counts = []
def count(phase, info):
    if phase == "stop" and counting:
        counts.append(info["generation"])
gc.callbacks.append(count)
counting = False
real_disable = gc.disable
def disable():
    global counting
    real_disable()
    counting = True  # main() has just started
gc.disable = disable

def report():
    while not gc.get_freeze_count():
        threading.Event().wait(0.05)
    print("FIGURES", counts[:1], gc.isenabled(), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=report, daemon=True).start()
sys.exit(main.main(sys.argv[1:]))
"""


def test_no_collection_runs_before_the_ports_open(tmp_path):
    sets = [
        f"namesrvListenPort={free_port()}",
        f"listenPort={free_port()}",
        f"grpcServerPort={free_port()}",
        "grpcListenHost=127.0.0.1",
        "listenHost=127.0.0.1",
        "namesrvListenHost=127.0.0.1",
        "brokerIP1=127.0.0.1",
        f"storePathRootDir={tmp_path}",
        f"mappedFileSizeCommitLog={4 * 1024 * 1024}",
    ]
    args = [arg for kv in sets for arg in ("--set", kv)]
    out = subprocess.run(
        [sys.executable, "-c", COLLECTIONS, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line.split(maxsplit=1)[1] for line in out.stdout.splitlines() if line.startswith("FIGURES ")]
    # the first collection after main() began is the full one after the ports opened; then the collector is on
    assert lines == ["[2] True"], out.stdout[-2000:]


def test_the_collector_is_on_again_when_main_returns(capsys):
    from broker import main

    assert main.main(["-p"]) == 0 and "listenPort=" in capsys.readouterr().out
    assert gc.isenabled()
