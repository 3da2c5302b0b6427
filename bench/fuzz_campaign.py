"""A fuzz campaign: malformed and mutated frames against a real broker subprocess, then checks it survived.

    python -m bench.fuzz_campaign --frames 250000 --seed 7 [--connections 8] [--keep DIR]

Starts ``python -m broker.main`` on free loopback ports (ACL off, fault injection off), sends ``--frames``
frames from ``bench.fuzz_frames`` (seeded: ``--seed`` replays a run) over raw connections to the broker and
its name server, then checks and prints:

* the process is alive and both ports answer a well-formed request;
* a real-client round trip (the C++ wheel: sync sends, then a push consumer) loses nothing;
* the broker log holds no traceback (a client's mistake must cost one warning line, never a traceback);
* nothing named from an illegal name (``*FuzzEscape*``) exists, inside or outside the store;
* the broker's private memory (USS and Pss from /proc/PID/smaps_rollup) before and after;
* SIGTERM exits 0.

Exit status 0 when every check holds, 1 otherwise. The CI test ``tests/fuzz/test_fuzz_broker.py`` runs the
same campaign with a fixed seed and fewer frames.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.fuzz_driver import FuzzStats, probe, run_fuzz
from bench.fuzz_frames import CORPUS_DIR, ILLEGAL_NAMES, load_corpus
from broker.testing.process import BrokerProcess, ChildError, set_args

# The C++ wheel helpers are shared with the compat tests (as bench.send_pull_cpp does).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "compat"))
from compat_support import (  # noqa: E402
    Collector,
    cpp_producer,
    cpp_push_consumer,
    make_message,
    unique,
)

#: Broker settings for a fuzz run: a small commit-log file (fuzz sends are small), ACL and fault injection off,
#: SQL92 filtering on (so that subscriptions reach the SQL parser).
FUZZ_BROKER_SETTINGS = (
    "mappedFileSizeCommitLog=67108864",
    "aclEnable=false",
    "faultInjectionEnable=false",
    "enablePropertyFilter=true",
    "filterSupportRetry=true",
)

TRACEBACK_MARK = "Traceback (most recent call last)"


@dataclass
class LogFindings:
    """What a broker log says about the fuzz run: tracebacks (each summarised in one line) and warnings."""

    tracebacks: list[str] = field(default_factory=list)
    warnings: int = 0
    errors: int = 0

    def summary(self, limit: int = 15) -> str:
        lines = [
            f"broker log: {len(self.tracebacks)} tracebacks, {self.errors} error lines, {self.warnings} warning lines"
        ]
        counts: dict[str, int] = {}
        for t in self.tracebacks:
            counts[t] = counts.get(t, 0) + 1
        for text, n in sorted(counts.items(), key=lambda kv: -kv[1])[:limit]:
            lines.append(f"  TRACEBACK x{n}: {text}")
        return "\n".join(lines)


def scan_log(text: str) -> LogFindings:
    """Tracebacks and warning counts in a broker log (JSON lines; anything else is counted as raw text)."""
    found = LogFindings()
    raw_lines: list[str] = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            raw_lines.append(line)
            continue
        if not isinstance(entry, dict):
            continue
        level = str(entry.get("level", "")).lower()
        if level == "warning":
            found.warnings += 1
        elif level in ("error", "critical"):
            found.errors += 1
        exc = entry.get("exception")
        if isinstance(exc, str) and TRACEBACK_MARK in exc:
            last = exc.strip().splitlines()[-1] if exc.strip() else ""
            where = [ln.strip() for ln in exc.splitlines() if ln.strip().startswith("File ")]
            found.tracebacks.append(
                f"{entry.get('event')} code={entry.get('code')}: {last[:160]} [{where[-1][:140] if where else '?'}]"
            )
    for i, line in enumerate(raw_lines):
        if TRACEBACK_MARK in line:
            tail = next((ln for ln in raw_lines[i + 1 :] if ln and not ln.startswith((" ", "\t"))), "")
            found.tracebacks.append(f"(raw) {tail[:200]}")
    return found


def private_memory(pid: int) -> dict[str, int]:
    """Rss, Pss, USS (Private_Clean + Private_Dirty) and Anonymous in KiB from /proc/PID/smaps_rollup ({} if
    unreadable). USS counts the store's mapped file pages too; Anonymous is the heap, where a leak shows."""
    values: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                    values[parts[0][:-1]] = int(parts[1])
    except OSError:
        return {}
    return {
        "rss_kb": values.get("Rss", 0),
        "pss_kb": values.get("Pss", 0),
        "uss_kb": values.get("Private_Clean", 0) + values.get("Private_Dirty", 0),
        "anon_kb": values.get("Anonymous", 0),
    }


def escaped_paths(root: Path) -> list[Path]:
    """Files or folders made from the fuzzer's traversal names, anywhere under ``root``."""
    return sorted(p for p in root.rglob("*FuzzEscape*"))


def cpp_round_trip(namesrv: str, count: int = 20, timeout_s: float = 40.0) -> list[str]:
    """Send ``count`` messages with the C++ wheel to a fresh topic, consume them with a push consumer;
    return the problems found (empty when every message came back)."""
    topic, group = unique("FuzzRT"), unique("FuzzRTG")
    keys = [f"rt-{i}" for i in range(count)]
    problems: list[str] = []
    with cpp_producer(namesrv, timeout_ms=10_000) as producer:
        for key in keys:
            result = producer.send_sync(make_message(topic, f"round trip {key}".encode(), key=key))
            if int(result.status) != 0:
                problems.append(f"send {key}: status {result.status}")
    collector = Collector()
    with cpp_push_consumer(namesrv, group, {topic: "*"}, collector):
        if not collector.wait_keys(keys, timeout_s):
            got = {i.key for i in collector.items()}
            problems.append(f"consumed {len(got & set(keys))} of {count}; missing {sorted(set(keys) - got)[:10]}")
    problems += collector.errors
    return problems


@dataclass
class CampaignResult:
    seed: int | str
    stats: FuzzStats
    log: LogFindings
    alive: bool
    probe_errors: list[str]
    round_trip_problems: list[str]
    escaped: list[Path]
    memory_before: dict[str, int]
    memory_after: dict[str, int]
    exit_code: int | None
    stop_error: str = ""
    log_alive: bool = True

    @property
    def ok(self) -> bool:
        return (
            self.alive
            and not self.probe_errors
            and not self.round_trip_problems
            and not self.escaped
            and not self.log.tracebacks
            and not self.stats.hangs
            and self.exit_code == 0
            and self.log_alive
        )

    def report(self) -> str:
        lines = [
            f"fuzz campaign seed={self.seed!r}: {'PASSED' if self.ok else 'FAILED'} "
            f"(replay: python -m bench.fuzz_campaign --seed {self.seed} --frames {self.stats.frames})",
            self.stats.summary(),
            self.log.summary(),
            f"process alive after the fuzz: {self.alive}; probes: {self.probe_errors or 'both ports answer'}; "
            f"log still written: {self.log_alive}",
            f"real-client round trip: {self.round_trip_problems or 'nothing lost'}",
            f"paths made from illegal names: {[str(p) for p in self.escaped[:10]] or 'none'}",
            f"private memory before: {self.memory_before}; after: {self.memory_after}",
            f"exit code after SIGTERM: {self.exit_code} {self.stop_error}",
        ]
        return "\n".join(lines)


def run_campaign(
    root: Path,
    *,
    seed: int | str,
    frames: int,
    connections: int = 8,
    namesrv_connections: int = 2,
    corpus_dir: Path = CORPUS_DIR,
    round_trip: bool = True,
    large_bodies: bool = False,
    illegal_names: Sequence[str] = ILLEGAL_NAMES,
    progress_every_s: float = 0.0,
) -> CampaignResult:
    """Start a broker under ``root``, fuzz it, check it; the broker is stopped (SIGTERM) before returning."""
    broker = BrokerProcess(
        root / "run" / "store", log_path=root / "run" / "broker.log", extra_args=set_args(*FUZZ_BROKER_SETTINGS)
    )
    broker.start()
    try:
        assert broker.proc is not None
        pid = broker.proc.pid
        memory_before = private_memory(pid)
        corpus = {target: load_corpus(corpus_dir, target) for target in ("broker", "namesrv")}
        progress = _Progress(frames, progress_every_s, pid) if progress_every_s else None
        stats = asyncio.run(
            run_fuzz(
                "127.0.0.1",
                broker.listen_port,
                broker.namesrv_port,
                seed=seed,
                frames=frames,
                connections=connections,
                namesrv_connections=namesrv_connections,
                corpus=corpus,
                large_bodies=large_bodies,
                illegal_names=illegal_names,
                progress=progress.add if progress else None,
            )
        )
        alive = broker.running
        probe_errors: list[str] = []
        for port, target in ((broker.listen_port, "broker"), (broker.namesrv_port, "namesrv")):
            try:
                asyncio.run(probe("127.0.0.1", port, target))
            except Exception as exc:  # noqa: BLE001 - reported, not raised: the report says what failed
                probe_errors.append(f"{target} port {port}: {type(exc).__name__}: {exc}")
        log_alive = _log_still_written(broker)
        problems = cpp_round_trip(broker.namesrv_addr) if round_trip and alive else []
        memory_after = private_memory(pid)
    finally:
        stop_error = ""
        try:
            exit_code = broker.stop(check=False) if broker.running else None
        except ChildError as exc:  # still running after SIGTERM: killed; the report says so
            exit_code, stop_error = None, str(exc).splitlines()[0]
        broker.kill()
    return CampaignResult(
        seed=seed,
        stats=stats,
        log=scan_log(broker.log_text()),
        alive=alive,
        probe_errors=probe_errors,
        round_trip_problems=problems,
        escaped=escaped_paths(root),
        log_alive=log_alive,
        memory_before=memory_before,
        memory_after=memory_after,
        exit_code=exit_code,
        stop_error=stop_error,
    )


def _log_still_written(broker: BrokerProcess, timeout_s: float = 5.0) -> bool:
    """Send one undecodable frame (the broker must log one warning for it) and see the log grow: a fuzz
    frame that silenced the log would otherwise pass as 'no traceback'."""
    size = broker.log_size()
    with socket.create_connection(("127.0.0.1", broker.listen_port), timeout=timeout_s) as sock:
        sock.sendall(b"\x00\x00\x00\x06\x00\x00\x00\x02{]")  # a JSON header that does not parse
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if broker.log_size() > size:
                return True
            time.sleep(0.05)
    return False


class _Progress:
    """A line every ``every_s`` seconds: frames sent so far, their rate, the broker's private memory."""

    def __init__(self, total: int, every_s: float, pid: int) -> None:
        self.total, self.every_s, self.pid = total, every_s, pid
        self.done = 0
        self.started = self.last = time.monotonic()

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            mem = private_memory(self.pid)
            print(
                f"  {self.done:,}/{self.total:,} frames, {self.done / (now - self.started):,.0f}/s, "
                f"broker USS {mem.get('uss_kb', 0) / 1024:.0f} MiB",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz_campaign", description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=250_000)
    ap.add_argument("--seed", default=str(int(time.time())), help="replays a run (any text; default: the time)")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--namesrv-connections", type=int, default=2)
    ap.add_argument("--large-bodies", action="store_true", help="now and then a body of about maxMessageSize")
    ap.add_argument(
        "--skip-names",
        default="",
        help="leave out the illegal names containing any of these characters (e.g. to fuzz a build "
        "that does not validate NUL or '/' in names yet: --skip-names '/\\0')",
    )
    ap.add_argument("--no-round-trip", action="store_true", help="skip the C++ wheel round trip")
    ap.add_argument("--keep", type=Path, help="run in this directory and keep the store and broker log")
    args = ap.parse_args(argv)
    seed: int | str = int(args.seed) if args.seed.lstrip("-").isdigit() else args.seed
    with tempfile.TemporaryDirectory(prefix="fuzz-campaign-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        print(
            f"fuzz campaign: seed {seed}, {args.frames:,} frames over {args.connections} connections; "
            f"broker log {root / 'run' / 'broker.log'}",
            flush=True,
        )
        result = run_campaign(
            root,
            seed=seed,
            frames=args.frames,
            connections=args.connections,
            namesrv_connections=args.namesrv_connections,
            round_trip=not args.no_round_trip,
            large_bodies=args.large_bodies,
            progress_every_s=10.0,
            illegal_names=[n for n in ILLEGAL_NAMES if not any(c in n for c in args.skip_names.replace("\\0", "\0"))],
        )
        print(result.report(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
