"""Send latency percentiles under the issue-15 load, from a Java program of ours (``bench/java/SendLatency.java``).

RocketMQ's ``benchmark.Producer`` prints only average and max RT, which cannot show the goal "p99 send latency no
worse than Java's". ``SendLatency`` applies the same load (N threads, synchronous sends of S-byte bodies through one
``DefaultMQProducer``, i.e. one client connection, binary headers) and records every send after a warm-up in a
per-thread log-linear histogram (exact below 1 ms, under 0.2% error above); it prints one JSON line at the end.

It is compiled at bench time with ``javac`` against the reference install's client jars (the ``lib`` folder beside
the ``bin`` holding ``rmqjava``, found as ``bench.vs_java`` finds it) into a cache folder outside the repository,
keyed by the source's hash, and run through ``rmqjava`` itself, so it gets the same JVM options as RocketMQ's own
benchmark tools (java uses the last ``-cp``: ours, which adds the classes to the same jars).

    python -m bench.send_latency [--namesrv HOST:PORT | --vs-java ROUNDS] [--threads 16] [--size 1024] [--seconds 30]

Without ``--namesrv`` it starts our broker on free ports and measures it; ``--vs-java N`` starts ours and Java's
(``rmq-anchor``) and alternates N rounds between them, printing the medians and ours/Java. ``bench.vs_java`` runs
it on both brokers in one run (``--latency-s``). Without Java, javac or the reference folder it says so, exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import os
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

SOURCE = Path(__file__).resolve().parent / "java" / "SendLatency.java"
MAIN_CLASS = "SendLatency"


class LatencyToolError(RuntimeError):
    """The program could not be compiled or run, or printed no figures; the message quotes its output's end."""


@dataclass(frozen=True)
class LatencyFigures:
    """What one run printed: sends counted after the warm-up only, latencies in milliseconds."""

    threads: int
    size: int
    seconds: float
    sent: int
    failed: int
    not_ok: int
    tps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    mean_ms: float
    rate: float = 0.0  # the open load's target sends/s; 0: closed load (each thread sends when answered)
    warmup_sent: int = 0
    warmup_failed: int = 0
    last_error: str | None = None

    @classmethod
    def from_json(cls, line: str | bytes) -> LatencyFigures:
        data = orjson.loads(line)
        lat = data["latency_ms"]
        return cls(
            threads=int(data["threads"]),
            size=int(data["size"]),
            seconds=float(data["seconds"]),
            sent=int(data["sent"]),
            failed=int(data["failed"]),
            not_ok=int(data["not_ok"]),
            tps=float(data["tps"]),
            p50_ms=float(lat["p50"]),
            p90_ms=float(lat["p90"]),
            p99_ms=float(lat["p99"]),
            p999_ms=float(lat["p999"]),
            max_ms=float(lat["max"]),
            mean_ms=float(lat["mean"]),
            rate=float(data.get("rate", 0.0)),
            warmup_sent=int(data.get("warmup_sent", 0)),
            warmup_failed=int(data.get("warmup_failed", 0)),
            last_error=data.get("last_error"),
        )


@dataclass(frozen=True)
class SendLatencyTool:
    """The compiled program and what runs it: ``rmqjava`` (JVM options) and the reference's jar folder."""

    rmqjava: Path
    lib: Path
    classes: Path

    @classmethod
    def prepare(cls, rmqjava: Path, cache_root: Path | None = None) -> SendLatencyTool:
        """Compile (once per source version) and return the tool; LatencyToolError says what is missing."""
        lib = rmqjava.resolve().parent.parent / "lib"
        if not any(lib.glob("rocketmq-client-*.jar")):
            raise LatencyToolError(f"no rocketmq-client jar in {lib}")
        javac = shutil.which("javac")
        if javac is None:
            raise LatencyToolError("javac not found on PATH (needs a JDK 17)")
        return cls(rmqjava, lib, compile_classes(javac, lib, cache_root or default_cache_root()))

    def command(
        self, namesrv: str, topic: str, *, threads: int, size: int, seconds: float, warmup: float, rate: float = 0.0
    ) -> list[str]:
        classpath = f"{self.classes}{os.pathsep}{self.lib}/*"
        return [
            str(self.rmqjava),
            "-cp",
            classpath,
            MAIN_CLASS,
            *("-n", namesrv, "-t", topic, "-w", str(threads), "-s", str(size)),
            *("-d", str(seconds), "-u", str(warmup), "-r", str(rate)),
        ]

    def run(
        self,
        namesrv: str,
        topic: str,
        *,
        threads: int = 16,
        size: int = 1024,
        seconds: float = 30.0,
        warmup: float = 5.0,
        rate: float = 0.0,
    ) -> LatencyFigures:
        """One load run, blocking for ``warmup + seconds`` plus the JVM's start and stop. ``rate`` > 0: an open load
        of that many sends/s in all, each send's latency counted from when it was due (SendLatency.java says why)."""
        cmd = self.command(namesrv, topic, threads=threads, size=size, seconds=seconds, warmup=warmup, rate=rate)
        try:
            done = subprocess.run(
                cmd, capture_output=True, stdin=subprocess.DEVNULL, timeout=warmup + seconds + 90, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise LatencyToolError(f"SendLatency did not finish: {_tail(exc.stderr)}") from exc
        lines = [line for line in done.stdout.splitlines() if line.startswith(b"{")]
        if done.returncode != 0 or not lines:
            raise LatencyToolError(
                f"SendLatency exited {done.returncode} without figures: {_tail(done.stderr or done.stdout)}"
            )
        return LatencyFigures.from_json(lines[-1])


def default_cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mini-rocketmq" / "send-latency"


def compile_classes(javac: str, lib: Path, cache_root: Path) -> Path:
    """The folder of SendLatency's classes, compiled into ``cache_root/<source hash>`` unless already there.
    Compiled into a temporary folder renamed into place, so two runs at once never see half a compile."""
    digest = hashlib.sha256(SOURCE.read_bytes() + str(lib).encode()).hexdigest()[:16]
    target = cache_root / digest
    if (target / f"{MAIN_CLASS}.class").exists():
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="compile-", dir=cache_root))
    try:
        done = subprocess.run(
            [javac, "-nowarn", "-cp", f"{lib}/*", "-d", str(work), str(SOURCE)],
            capture_output=True,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise LatencyToolError(f"javac failed: {_tail(done.stderr or done.stdout)}")
        try:
            work.rename(target)
        except OSError:  # another run compiled it first: theirs is the same source
            if not (target / f"{MAIN_CLASS}.class").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _tail(output: bytes | str | None, chars: int = 600) -> str:
    if not output:
        return "(no output)"
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    return text.strip()[-chars:]


def measure(rmqjava: Path, namesrv: str, topic: str, seconds: float, notes: list[str]) -> LatencyFigures | None:
    """The latency phase of ``bench.vs_java``: issue 15's load (16 threads, 1 KiB) for ``seconds`` after a 5 s
    warm-up; None (and a note saying why) when the tool cannot run, so the other phases' figures still print."""
    if seconds <= 0:
        return None
    try:
        figures = SendLatencyTool.prepare(rmqjava).run(namesrv, topic, seconds=seconds)
    except LatencyToolError as exc:
        notes.append(f"latency phase: {exc}")
        return None
    if figures.failed:
        notes.append(f"latency phase: {figures.failed} sends failed (last: {figures.last_error})")
    return figures


LATENCY_ROWS = (
    ("send p50 ms (SendLatency, 16 threads)", "p50_ms", ".3f"),
    ("send p99 ms", "p99_ms", ".3f"),
    ("send p99.9 ms", "p999_ms", ".3f"),
    ("send max ms", "max_ms", ".1f"),
    ("  TPS during the latency phase", "tps", ",.0f"),
)


def report_lines(java: LatencyFigures | None, ours: LatencyFigures | None) -> list[str]:
    """Rows in ``bench.vs_java``'s table layout; for latencies ours/Java above 1.00x means ours is slower."""
    if java is None and ours is None:
        return []
    out = []
    for label, attr, spec in LATENCY_ROWS:
        j = getattr(java, attr) if java else None
        o = getattr(ours, attr) if ours else None
        ratio = f"{o / j:.2f}x" if o and j else "-"
        out.append(f"{label:38} {_fmt(j, spec):>14} {_fmt(o, spec):>14} {ratio:>10}")
    return out


def ceiling_lines(ceiling: LatencyFigures | None) -> list[str]:
    """The protocol ceiling's latencies: what the client and the machine cost a send with no broker work at all."""
    if ceiling is None:
        return []
    return [
        f"  its send latency under SendLatency: p50 {ceiling.p50_ms:.3f} ms, p99 {ceiling.p99_ms:.3f} ms, "
        f"max {ceiling.max_ms:.1f} ms at {ceiling.tps:,.0f} TPS"
    ]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


@contextlib.contextmanager
def our_broker() -> Iterator[str]:
    """A fresh broker of this tree on free ports; yields its name server address. Default 1 GiB commit-log files,
    as the Java broker's: with 64 MiB ones, ours rolled to a new file every ~10 s of this load and Java never did."""
    from bench.broker_proc import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="send-latency-") as tmp:
        broker = BrokerProcess(store_dir=Path(tmp), fault_injection=False).start()
        try:
            yield broker.namesrv
        finally:
            broker.stop()


@contextlib.contextmanager
def java_broker(bin_dir: Path) -> Iterator[str]:
    """Apache RocketMQ 4.9.7 from ``rmq-anchor`` on RMQ_NS_PORT/RMQ_BROKER_PORT, else free ports. rmq-anchor keeps
    one store and pid folder per install: it stops whatever that install already runs, so use an idle install."""
    from bench.broker_proc import free_port

    ns_port = os.environ.get("RMQ_NS_PORT") or str(free_port())
    env = dict(os.environ, RMQ_NS_PORT=ns_port, RMQ_BROKER_PORT=os.environ.get("RMQ_BROKER_PORT") or str(free_port()))
    anchor = str(bin_dir / "rmq-anchor")
    try:
        up = subprocess.run([anchor, "start"], env=env, capture_output=True, text=True, timeout=180, check=False)
        if up.returncode != 0:
            raise LatencyToolError(f"rmq-anchor start failed: {_tail(up.stdout + up.stderr)}")
        yield f"127.0.0.1:{ns_port}"
    finally:  # also after a failed start: a JVM that was only slow boots later and must not be left running
        subprocess.run([anchor, "stop"], env=env, capture_output=True, timeout=120, check=False)


def compare_rounds(tool: SendLatencyTool, bin_dir: Path, rounds: int, topic: str, load: dict) -> list[str]:
    """Both brokers up at once, rounds alternating ours / Java, so a noisy machine hits both alike; the medians of
    the rounds with ours/Java (latencies above 1.00x: ours is slower; TPS above 1.00x: ours is faster)."""
    results: dict[str, list[LatencyFigures]] = {"java": [], "ours": []}
    out = []
    with our_broker() as ours_ns, java_broker(bin_dir) as java_ns:
        for n in range(rounds):
            for name, namesrv in (("ours", ours_ns), ("java", java_ns)):
                fig = tool.run(namesrv, topic, **load)
                results[name].append(fig)
                line = f"round {n + 1} {name:4}: {orjson.dumps(fig).decode()}"
                print(line, flush=True)
                out.append(line)
    medians = {name: _median_figures(figs) for name, figs in results.items()}
    title = f"medians of {rounds} rounds"
    out.append(f"{title:38} {'Java 4.9.7':>14} {'mini-rocketmq':>14} {'ours/Java':>10}")
    out.extend(report_lines(medians["java"], medians["ours"]))
    return out


def _median_figures(figs: list[LatencyFigures]) -> LatencyFigures:
    fields = ("seconds", "tps", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms")
    medians = {f: statistics.median(getattr(fig, f) for fig in figs) for f in fields}
    return dataclasses.replace(figs[0], sent=sum(f.sent for f in figs), failed=sum(f.failed for f in figs), **medians)


def prepare_reference(rmq_bin: str | None) -> tuple[SendLatencyTool, Path] | None:
    """The reference tools' folder (``--rmq-bin``, else PATH, else the cache) and the compiled SendLatency tool;
    None, after one "skipped: ..." line saying what is missing, when either is not there (the script then exits 0)."""
    from bench.vs_java import REFERENCE_SETUP, find_reference_bin

    bin_dir = find_reference_bin(rmq_bin)
    if bin_dir is None:
        print(f"skipped: Apache RocketMQ 4.9.7 tools not found; install them with {REFERENCE_SETUP}")
        return None
    try:
        return SendLatencyTool.prepare(bin_dir / "rmqjava"), bin_dir
    except LatencyToolError as exc:
        print(f"skipped: {exc}")
        return None


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(description="Send latency percentiles from our Java load program.")
    parser.add_argument("--namesrv", help="name server to measure (default: start our broker on free ports)")
    parser.add_argument("--vs-java", type=int, metavar="ROUNDS", help="our broker and Java's, rounds alternating")
    parser.add_argument("--topic", default="SendLatencyTopic")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=0.0, help="open load: sends/s in all (default: closed load)")
    parser.add_argument("--rmq-bin", help="folder with rmq-anchor and rmqjava (default: PATH, then ~/.cache)")
    args = parser.parse_args(argv)
    prepared = prepare_reference(args.rmq_bin)
    if prepared is None:
        return 0
    tool, bin_dir = prepared
    load = {
        "threads": args.threads,
        "size": args.size,
        "seconds": args.seconds,
        "warmup": args.warmup,
        "rate": args.rate,
    }
    if args.vs_java:
        print("\n".join(compare_rounds(tool, bin_dir, args.vs_java, args.topic, load)[-len(LATENCY_ROWS) - 1 :]))
        return 0
    if args.namesrv:
        figures = tool.run(args.namesrv, args.topic, **load)
    else:
        with our_broker() as namesrv:
            figures = tool.run(namesrv, args.topic, **load)
    print(orjson.dumps(figures).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
