"""Every code block of README.md and docker/README.md runs as written, so the docs cannot rot.

Blocks run against one live broker started here: in each block, the default name server and broker
addresses (``127.0.0.1:9876``, ``127.0.0.1:10911``) are replaced by the live broker's; nothing else is
changed. ``sh`` blocks run in bash (``-e -o pipefail``) with this interpreter's bin directory on PATH,
as after ``./scripts/dev.sh shell``; ``python`` blocks run as a script, or, when they define
``test_`` functions, as a user's test file with the pytest plugin. A block that cannot run here (it
needs Docker, or binds the default ports) says so in its first line, visibly to readers as well:
``# not run by tests/docs: <reason>``.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.testing.embedded import EmbeddedBroker

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docker/README.md")
SKIP_MARK = "# not run by tests/docs:"
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first[len(SKIP_MARK) :].strip() if first.startswith(SKIP_MARK) else None


def blocks_of(doc: str) -> list[Block]:
    text = (REPO / doc).read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        indent = len(m["indent"])
        code = "".join(
            line[indent:] if line[:indent].isspace() else line for line in m["body"].splitlines(keepends=True)
        )
        out.append(Block(doc, text.count("\n", 0, m.start()) + 1, m["lang"], code))
    return out


ALL_BLOCKS = [b for doc in DOCS for b in blocks_of(doc)]
RUNNABLE = [b for b in ALL_BLOCKS if b.skip_reason is None]


def test_the_docs_have_blocks_and_every_skip_says_why():
    assert len(ALL_BLOCKS) >= 8 and len(RUNNABLE) >= 3, [b.id for b in ALL_BLOCKS]
    for b in ALL_BLOCKS:
        if b.skip_reason is not None:
            assert len(b.skip_reason) >= 10, f"{b.id}: say why the block cannot run here"
        else:
            assert b.lang in ("sh", "python"), (
                f"{b.id}: a runnable block must be sh or python, or be marked '{SKIP_MARK} <reason>'"
            )


def test_the_block_parser_sees_indented_blocks_and_marks():
    readme = {b.line: b for b in blocks_of("README.md")}
    plugin = [b for b in readme.values() if "def test_" in b.code]
    assert plugin and plugin[0].code.startswith("from rocketmq.client import")  # the list item's indent is gone
    assert any(b.skip_reason and "default ports" in b.skip_reason for b in readme.values())


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(store_dir=tmp_path_factory.mktemp("docs-store")) as b:
        yield b


def localize(code: str, broker: EmbeddedBroker) -> str:
    return code.replace("127.0.0.1:9876", broker.namesrv_addr).replace("127.0.0.1:10911", broker.broker_addr)


def env_for_blocks() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


#: What the C++ wheel's log says when its first send lost one of its own start-up races: its heartbeat thread held
#: the connection ("get timed_mutex timeout"), or the route arrived before the producer was registered with the
#: client instance, so the route was dropped ("didn't get the session_credentials from any producers and
#: consumers", then "could not find property mq").
CPP_STARTUP_RACES = ("get timed_mutex timeout", "didn't get the session_credentials from any producers")


def lost_cpp_startup_race(output: str, since: float) -> bool:
    """The C++ wheel's own start-up races (tests/plugin/sample/sample_basic.py, first_cpp_send): a first send right
    after start() fails with "No route info" when the client lost one (``CPP_STARTUP_RACES``), which a loaded
    machine makes likelier. Such a run is repeated (twice at most); any other failure is the block's."""
    if "No route info of this topic" not in output:
        return False
    for log in (Path.home() / "logs" / "rocketmq-cpp").glob("*_rocketmq-cpp.log*"):
        try:
            if log.stat().st_mtime >= since:
                text = log.read_text(errors="replace")
                if any(race in text for race in CPP_STARTUP_RACES):
                    return True
        except OSError:
            continue
    return False


GRPC_CLIENT_IMPORT = "from rocketmq import ClientConfiguration"


@pytest.fixture(scope="module")
def grpc_broker(tmp_path_factory):
    """A broker subprocess with its 5.x endpoint in plaintext (the README's 5.x block says so)."""
    from bench.broker_proc import BrokerProcess

    broker = BrokerProcess(store_dir=tmp_path_factory.mktemp("docs-grpc-store"), fault_injection=False)
    broker.start()
    yield broker
    broker.stop()


def run_grpc_block(code: str, tmp_path: Path, request: pytest.FixtureRequest) -> subprocess.CompletedProcess[str]:
    """A 5.x client block runs in the 5.x client's own venv (it and the C++ wheel share the import name)."""
    sys.path.insert(0, str(REPO / "tests" / "compat"))
    try:
        from grpc_support import ClientVenvError, ensure_client_venv
    finally:
        sys.path.pop(0)
    try:
        python = ensure_client_venv()
    except ClientVenvError as exc:
        pytest.fail(str(exc))
    broker = request.getfixturevalue("grpc_broker")
    code = code.replace("127.0.0.1:8081", broker.grpc_endpoint).replace("127.0.0.1:9876", broker.namesrv)
    (tmp_path / "block.py").write_text(code)
    return subprocess.run(
        [str(python), str(tmp_path / "block.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def plugin_installed() -> bool:
    # by name: an install made before the plugin moved names the shim broker.pytest_plugin
    return any(ep.name == "mini_rocketmq" for ep in importlib.metadata.entry_points(group="pytest11"))


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.id)
def test_block_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path):
    if GRPC_CLIENT_IMPORT in block.code:
        proc = run_grpc_block(block.code, tmp_path, request)
        assert proc.returncode == 0, (
            f"{block.id} failed ({proc.returncode}):\n{block.code}\n--- stdout\n"
            f"{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
        return
    broker: EmbeddedBroker = request.getfixturevalue("broker")
    code = localize(block.code, broker)
    if "rocketmq.client" in code:
        pytest.importorskip("rocketmq.client")
    if block.lang == "sh":
        cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
    elif "def test_" in code:
        (tmp_path / "test_from_readme.py").write_text(code)
        (tmp_path / "pytest.ini").write_text("[pytest]\n")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_from_readme.py"]
        if not plugin_installed():
            cmd += ["-p", "broker.testing.pytest_plugin"]
    else:
        (tmp_path / "block.py").write_text(code)
        cmd = [sys.executable, str(tmp_path / "block.py")]
    cwd = tmp_path if block.lang == "python" else REPO
    for _ in range(3):
        started = time.time()
        proc = subprocess.run(
            cmd, cwd=cwd, env=env_for_blocks(), capture_output=True, text=True, timeout=120, check=False
        )
        if proc.returncode == 0 or not lost_cpp_startup_race(proc.stdout + proc.stderr, started):
            break
    assert proc.returncode == 0, (
        f"{block.id} failed ({proc.returncode}):\n{code}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-3000:]}"
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    if "consumed:" in code:  # the client example: it must get its message back, then exit
        assert "consumed: b'hello'" in proc.stdout, proc.stdout
