"""The ``mqbench`` command: run a scenario, compare two scores, re-render a report, list scenarios.

Exit codes: 0 success; 1 a run failed or ``compare`` found a regression; 2 bad input (scenario file,
arguments, missing score).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.scenario import ScenarioError, bundled_scenarios, load_scenario

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _err(msg: str) -> None:
    print(f"mqbench: error: {msg}", file=sys.stderr)


def _summary(score: dict[str, Any]) -> str:
    c, p, e = score["counts"], score["publish"], score["end_to_end"]["latency_ms"]
    lat = p["latency_ms"]
    lost = (
        f"lost {c['lost']:,}"
        if c["lost"] is not None
        else f"lost unknown (drain timed out with {c['unconsumed']:,} unconsumed)"
    )
    from bench.expect import evaluate, verdict_line

    lines = [
        verdict_line(evaluate(score)),
        f"sent {c['sent']:,}  acked {c['acked']:,}  failed {c['failed']:,}  consumed {c['consumed_unique']:,} "
        f"(+{c['duplicated']:,} duplicates)  {lost}  out-of-order {c['out_of_order']:,}",
        f"publish {p['rate_msg_s'] or 0:,.0f} msg/s {p['rate_mib_s'] or 0:,.2f} MiB/s  latency ms "
        f"p50 {lat['p50']} p99 {lat['p99']} p99.9 {lat['p99_9']} max {lat['max']}",
        f"end-to-end latency ms p50 {e['p50']} p99 {e['p99']} max {e['max']}  "
        f"backlog max {score['backlog']['max']:,} drain {score['backlog']['drain_time_s']} s",
    ]
    if score["errors"]["all_by_kind"]:
        lines.append("errors: " + ", ".join(f"{k}={v:,}" for k, v in score["errors"]["all_by_kind"].items()))
    b = score.get("broker") or {}
    if b.get("started_by_mqbench"):
        lines.append(
            f"broker boot {b.get('boot_time_s')} s, RSS at boot {(b.get('rss_at_boot_bytes') or 0) / 2**20:.0f} "
            f"MiB, peak {(b.get('rss_peak_bytes') or 0) / 2**20:.0f} MiB"
        )
    return "\n".join(lines)


BENCH_MODULES = ("yaml", "pyarrow", "pyspark", "pandas", "matplotlib")


def _require_bench() -> None:
    """Name the missing extra before a broker or Spark is started, not in a traceback halfway through."""
    from mqclient.cli_support import require

    for module in BENCH_MODULES:
        require(module, "bench")


def cmd_run(args: argparse.Namespace) -> int:
    _require_bench()
    from bench.run import RunError, RunOptions, run_scenario
    from bench.worker import quiet_logs

    if bool(args.ak) != bool(args.sk):
        _err("give both --ak and --sk (or neither)")
        return EXIT_BAD_INPUT
    try:
        scen = load_scenario(args.scenario)
    except ScenarioError as exc:
        _err(str(exc))
        return EXIT_BAD_INPUT
    overrides: dict[str, Any] = {}
    if args.duration is not None:
        overrides["duration_s"] = args.duration
    if args.warmup is not None:
        overrides["warmup_s"] = args.warmup
    if overrides:
        scen = dataclasses.replace(scen, **overrides)
    if args.namesrv is not None and (scen.faults or scen.message_faults):
        print(
            "mqbench: note: this scenario injects faults; they only work against our broker started with "
            "faultInjectionEnable=true",
            file=sys.stderr,
        )
    spark_conf: dict[str, str] = {}
    for item in args.conf or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _err(f"--conf wants KEY=VALUE (a Spark setting), got {item!r}")
            return EXIT_BAD_INPUT
        spark_conf[key] = value
    out = Path(args.out) if args.out else Path("bench") / "out" / f"{scen.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    quiet_logs()
    print(f"mqbench: running {scen.name} ({scen.source}) on {args.master} → {out}", file=sys.stderr)
    driver = args.driver
    if args.protocol == "grpc":
        if driver not in (None, "grpc"):
            _err(f"--protocol grpc drives the 5.x endpoint; it cannot be combined with --driver {driver}")
            return EXIT_BAD_INPUT
        driver = "grpc"
    if driver == "grpc" and args.namesrv and not args.grpc_endpoint:
        _err("--protocol grpc against an existing cluster needs --grpc-endpoint HOST:PORT")
        return EXIT_BAD_INPUT
    try:
        result = run_scenario(
            scen,
            RunOptions(
                out_dir=out,
                namesrv=args.namesrv,
                master=args.master,
                driver=driver,
                tasks=args.tasks,
                progress=not args.quiet,
                keep_store=args.keep_store,
                spark_conf=spark_conf,
                access_key=args.ak,
                secret_key=args.sk,
                grpc_endpoint=args.grpc_endpoint,
            ),
        )
    except RunError as exc:
        _err(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_FAILED
    print(_summary(result.score))
    print(f"report: {out / 'report.html'}  score: {out / 'score.json'}")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from bench.compare import CompareError, compare, format_table, load_score

    overrides: dict[str, float] = {}
    for item in args.metric_threshold or []:
        name, sep, value = item.partition("=")
        try:
            overrides[name] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            _err(f"--metric-threshold wants METRIC=FRACTION, got {item!r}")
            return EXIT_BAD_INPUT
    try:
        a, b = load_score(args.a), load_score(args.b)
    except CompareError as exc:
        _err(str(exc))
        return EXIT_BAD_INPUT
    deltas = compare(a, b, threshold=args.threshold, overrides=overrides, latency_floor_ms=args.latency_floor_ms)
    regressions = [d for d in deltas if d.regression]
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "metric": d.metric.path,
                        "a": d.a,
                        "b": d.b,
                        "change": d.change,
                        "relative": d.relative,
                        "regression": d.regression,
                    }
                    for d in deltas
                ],
                indent=2,
            )
        )
    else:
        print(format_table(deltas, name_a=Path(args.a).name or "A", name_b=Path(args.b).name or "B"))
        print(
            f"\n{len(regressions)} regression(s) beyond {args.threshold:.0%}"
            + (": " + ", ".join(d.metric.path for d in regressions) if regressions else "")
        )
    return EXIT_FAILED if regressions else EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from bench.report import write_report

    out = Path(args.dir)
    if not (out / "score.json").exists() or not (out / "series.json").exists():
        _err(f"{out} holds no score.json/series.json")
        return EXIT_BAD_INPUT
    print(write_report(out))
    return EXIT_OK


def cmd_score(args: argparse.Namespace) -> int:
    _require_bench()
    from bench.report import write_report
    from bench.score import score_outcomes, write_score
    from bench.session import SparkLaunchError, get_session

    out = Path(args.dir)
    if not (out / "outcomes").is_dir():
        _err(f"{out} holds no outcomes/ table")
        return EXIT_BAD_INPUT
    meta = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    try:
        spark = get_session(args.master, log_dir=out)
    except SparkLaunchError as exc:
        _err(str(exc))
        return EXIT_FAILED
    try:
        result = score_outcomes(spark, out / "outcomes", meta)
    finally:
        spark.stop()
    write_score(result, out)
    write_report(out, result.score, result.series)
    print(_summary(result.score))
    return EXIT_OK


def scenarios_table(paths: list[Path], width: int) -> str:
    """Name, load and the whole description, wrapped (never cut) under its own column."""
    import textwrap

    rows = []
    for path in paths:
        try:
            scen = load_scenario(path)
        except ScenarioError as exc:
            rows.append((path.stem, "", f"INVALID: {exc.problems[0]}"))
            continue
        rate = f"{scen.producer_rate:,.0f}/s" if scen.producer_rate else "max"
        load = f"{scen.send_mode} {rate} {scen.duration_s:g}s"
        rows.append((path.stem, load, " ".join(scen.description.split())))
    name_w = max([len("SCENARIO")] + [len(r[0]) for r in rows])
    load_w = max([len("LOAD")] + [len(r[1]) for r in rows])
    indent = name_w + load_w + 4
    text_w = max(30, width - indent)
    out = [f"{'SCENARIO':<{name_w}}  {'LOAD':<{load_w}}  DESCRIPTION"]
    for name, load, desc in rows:
        lines = textwrap.wrap(desc, text_w, break_on_hyphens=False, break_long_words=False) or [""]
        out.append(f"{name:<{name_w}}  {load:<{load_w}}  {lines[0]}")
        out.extend(" " * indent + line for line in lines[1:])
    return "\n".join(out)


def cmd_scenarios(args: argparse.Namespace) -> int:
    import shutil

    print(scenarios_table(bundled_scenarios(), shutil.get_terminal_size((120, 24)).columns))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    bad = 0
    for name in args.scenarios:
        try:
            scen = load_scenario(name)
            print(f"ok: {scen.source}")
        except ScenarioError as exc:
            _err(str(exc))
            bad += 1
    return EXIT_BAD_INPUT if bad else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqbench", description="Benchmark a RocketMQ broker with Spark-driven load.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a scenario and score it")
    r.add_argument("scenario", help="a scenario YAML file, or the name of a bundled one (see 'mqbench scenarios')")
    r.add_argument("--namesrv", help="HOST:PORT of the name server; default: start our broker for the run")
    r.add_argument("--master", default="local[*]", help="Spark master: local[*] (default), spark://HOST:PORT, k8s://…")
    r.add_argument("--out", help="output directory (default bench/out/<scenario>-<time>)")
    r.add_argument(
        "--driver", choices=("asyncio", "cpp", "grpc"), help="client driving the load (default: the scenario's)"
    )
    r.add_argument(
        "--protocol",
        choices=("remoting", "grpc"),
        help="grpc: drive the 5.x endpoint (same as --driver grpc); remoting: the scenario's 4.x driver",
    )
    r.add_argument(
        "--grpc-endpoint", help="HOST:PORT of the broker's gRPC endpoint, with --namesrv and --protocol grpc"
    )
    r.add_argument("--tasks", type=int, help="number of Spark load tasks (default: scenario or all cores)")
    r.add_argument("--duration", type=float, help="override the scenario's duration_s")
    r.add_argument("--warmup", type=float, help="override the scenario's warmup_s")
    r.add_argument(
        "--conf",
        action="append",
        metavar="KEY=VALUE",
        help="a Spark setting, repeatable (e.g. spark.kubernetes.container.image=…, spark.executor.memory=2g)",
    )
    r.add_argument("--quiet", action="store_true", help="no live progress lines")
    r.add_argument(
        "--ak",
        default=os.environ.get("ROCKETMQ_ACCESS_KEY"),
        help="ACL access key every client signs with (default: $ROCKETMQ_ACCESS_KEY); creating the "
        "run's topics needs an admin account",
    )
    r.add_argument(
        "--sk", default=os.environ.get("ROCKETMQ_SECRET_KEY"), help="ACL secret key (default: $ROCKETMQ_SECRET_KEY)"
    )
    r.add_argument(
        "--keep-store",
        action="store_true",
        help="keep the store of the broker mqbench started (deleted after the run by default)",
    )
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("compare", help="compare two scores; exit 1 on a regression")
    c.add_argument("a", help="baseline run directory or score.json")
    c.add_argument("b", help="candidate run directory or score.json")
    c.add_argument("--threshold", type=float, default=0.10, help="relative change counted as a regression (0.10)")
    c.add_argument(
        "--metric-threshold",
        action="append",
        metavar="METRIC=FRACTION",
        help="per-metric threshold, e.g. publish.latency_ms.p99=0.25",
    )
    c.add_argument(
        "--latency-floor-ms",
        type=float,
        default=1.0,
        help="latency changes below this many ms never count as regressions (1.0)",
    )
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=cmd_compare)

    rep = sub.add_parser("report", help="re-render report.html from score.json and series.json")
    rep.add_argument("dir")
    rep.set_defaults(func=cmd_report)

    s = sub.add_parser("score", help="re-score a run directory's outcome table")
    s.add_argument("dir")
    s.add_argument("--master", default="local[*]")
    s.set_defaults(func=cmd_score)

    ls = sub.add_parser("scenarios", help="list the bundled scenarios")
    ls.set_defaults(func=cmd_scenarios)

    v = sub.add_parser("validate", help="check scenario files without running them")
    v.add_argument("scenarios", nargs="+")
    v.set_defaults(func=cmd_validate)
    return p


def main(argv: list[str] | None = None) -> int:
    from mqclient.cli_support import run_cli

    return run_cli("mqbench", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
