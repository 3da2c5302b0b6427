"""Benchmark scenarios: the typed schema of ``bench/scenarios/*.yaml`` and its loader with clear errors.

Field names follow OpenMessaging Benchmark workloads in snake_case (OMB's camelCase spellings are
accepted as aliases), plus what RocketMQ clients and our fault injection need. Every problem in a
file is reported at once, each naming the file and the field, with a "did you mean" for typos.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.expect import Expect, parse_expect

SEND_MODES = ("sync", "async", "oneway", "batch")
DRIVERS = ("asyncio", "cpp", "grpc")
MESSAGE_FAULT_PROPERTIES = ("brokerSleepMs", "brokerStallAppendMs")
# FAULT_INJECT (5001) kinds our broker understands; kept in one place so a typo in a scenario is
# caught before a broker is started rather than answered with an error mid-run.
FAULT_KINDS = (
    "stall_send_workers",
    "stall_queue",
    "stall_append",
    "drain_transient_pool",
    "slow_fsync",
    "clear",
)

_OMB_ALIASES = {
    "partitionsPerTopic": "queues_per_topic",
    "partitions_per_topic": "queues_per_topic",
    "messageSize": "message_size",
    "producersPerTopic": "producers_per_topic",
    "subscriptionsPerTopic": "subscriptions_per_topic",
    "consumerPerSubscription": "consumers_per_subscription",
    "consumer_per_subscription": "consumers_per_subscription",
    "producerRate": "producer_rate",
    "consumerBacklogSizeGB": "consumer_backlog_size_gb",
    "warmupDurationMinutes": "warmup_minutes",
    "testDurationMinutes": "duration_minutes",
}


class ScenarioError(ValueError):
    """A scenario file that cannot be run; ``problems`` lists every issue found."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"bad scenario {source}:\n{lines}")


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Client knobs, named after the Java client's settings they imitate."""

    send_timeout_ms: int = 3000  # J sendMsgTimeout: the budget for all attempts of one send
    attempt_timeout_ms: int | None = None  # cap per attempt; None = whatever is left of the budget
    retries: int = 2  # J retryTimesWhenSendFailed (sync) / retryTimesWhenSendAsyncFailed
    retry_on_timeout: bool = True
    max_in_flight: int = 64  # async/oneway: outstanding requests per producer
    batch_size: int = 16  # send_mode batch: messages per SEND_BATCH_MESSAGE
    compress_over_bytes: int = 4096  # J compressMsgBodyOverHowmuch
    pull_batch_size: int = 32  # J pullBatchSize
    pull_threshold_for_queue: int = 1000  # J pullThresholdForQueue (cached messages per queue)
    pull_threshold_size_for_queue_mb: int = 100  # J pullThresholdSizeForQueue
    consume_threads: int = 20  # J consumeThreadMin
    consume_delay_ms: float = 0.0  # time the listener spends per message (slow consumer)
    suspend_timeout_ms: int = 15000  # long-poll suspension asked of the broker
    pull_timeout_ms: int = 30000
    heartbeat_interval_s: float = 30.0
    rebalance_interval_s: float = 10.0
    commit_interval_s: float = 5.0


@dataclass(frozen=True, slots=True)
class BrokerFault:
    """A FAULT_INJECT (5001) admin request sent to every broker ``at_s`` seconds into the load."""

    at_s: float
    kind: str
    duration_ms: int = 0
    value: str = ""
    target: str | None = None


@dataclass(frozen=True, slots=True)
class MessageFault:
    """A user property that makes our broker misbehave on that one message (faultInjectionEnable)."""

    property: str
    value: int
    every: int = 0  # every Nth message of each producer (0 = only the window/count rule)
    from_s: float = 0.0  # window, seconds after load start
    until_s: float | None = None
    max_per_producer: int | None = None


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """How ``mqbench run`` starts our broker when no name server is given."""

    config: Mapping[str, str] = field(default_factory=dict)
    fault_injection: bool = True
    boot_timeout_s: float = 60.0


@dataclass(frozen=True, slots=True)
class DebugSpec:
    """Test hooks: make the accounting visibly catch a problem we plant ourselves."""

    drop_consumed_seqs: tuple[int, ...] = ()  # consumers pretend never to have seen these seqs


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str = ""
    topics: int = 1
    queues_per_topic: int = 4
    message_size: int = 1024
    producers_per_topic: int = 1
    subscriptions_per_topic: int = 1
    consumers_per_subscription: int = 1
    producer_rate: float | None = None  # msg/s over all producers; None = unlimited
    send_mode: str = "sync"
    duration_s: float = 10.0
    warmup_s: float = 0.0
    drain_timeout_s: float = 30.0
    max_messages_per_producer: int | None = None  # stop a producer early (small CI runs)
    driver: str = "asyncio"
    tasks: int | None = None  # Spark tasks (load workers); None = min(cores, clients)
    topic_prefix: str = "bench"
    client: ClientConfig = field(default_factory=ClientConfig)
    faults: tuple[BrokerFault, ...] = ()
    message_faults: tuple[MessageFault, ...] = ()
    broker: BrokerSpec = field(default_factory=BrokerSpec)
    debug: DebugSpec = field(default_factory=DebugSpec)
    expect: Mapping[str, Expect] = field(default_factory=dict)  # bench.expect: what the run should show
    source: str = ""

    @property
    def producers(self) -> int:
        return self.topics * self.producers_per_topic

    @property
    def consumers(self) -> int:
        return self.topics * self.subscriptions_per_topic * self.consumers_per_subscription

    @property
    def rate_per_producer(self) -> float | None:
        return None if self.producer_rate is None else self.producer_rate / self.producers

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["broker"]["config"] = dict(self.broker.config)
        out["expect"] = {k: dataclasses.asdict(v) for k, v in self.expect.items()}
        return out


# ---------------------------------------------------------------------------------------------
# loading


class _Checker:
    """Collects problems instead of stopping at the first one."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def unknown_keys(self, where: str, data: Mapping[str, Any], known: list[str]) -> None:
        for key in data:
            if key in known:
                continue
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f"; known fields: {', '.join(sorted(known))}"
            self.problems.append(f"{where}: unknown field '{key}'{hint}")

    def number(
        self, where: str, value: Any, *, integer: bool, minimum: float | None = 0, positive: bool = False
    ) -> Any:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and integer and not float(value).is_integer():
            ok = False
        if ok and not math.isfinite(float(value)):
            ok = False
        kind = "an integer" if integer else "a number"
        if not ok:
            self.problems.append(f"{where} must be {kind}, got {value!r}")
            return None
        value = int(value) if integer else float(value)
        if positive and value <= 0:
            self.problems.append(f"{where} must be > 0, got {value!r}")
            return None
        if minimum is not None and value < minimum:
            self.problems.append(f"{where} must be >= {minimum}, got {value!r}")
            return None
        return value

    def choice(self, where: str, value: Any, choices: tuple[str, ...]) -> Any:
        if value not in choices:
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            self.problems.append(f"{where} must be one of {', '.join(choices)}, got {value!r}{hint}")
            return None
        return value

    def boolean(self, where: str, value: Any) -> Any:
        if not isinstance(value, bool):
            self.problems.append(f"{where} must be true or false, got {value!r}")
            return None
        return value

    def string(self, where: str, value: Any) -> Any:
        if not isinstance(value, str):
            self.problems.append(f"{where} must be a string, got {value!r}")
            return None
        return value


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "source"]


def _fill(chk: _Checker, where: str, cls: type, data: Any, specials: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the scalar fields of ``cls`` present in ``data`` by their declared default's type."""
    if not isinstance(data, Mapping):
        chk.problems.append(f"{where} must be a mapping, got {type(data).__name__}")
        return {}
    names = _field_names(cls)
    chk.unknown_keys(where, data, names)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        path = f"{where}.{f.name}" if where else f.name
        if f.name in specials:
            out[f.name] = specials[f.name](path, value)
            continue
        ann = str(f.type)
        if value is None and "None" in ann:
            out[f.name] = None
        elif ann.startswith("bool"):
            out[f.name] = chk.boolean(path, value)
        elif ann.startswith("int"):
            out[f.name] = chk.number(path, value, integer=True)
        elif ann.startswith("float"):
            out[f.name] = chk.number(path, value, integer=False)
        elif ann.startswith("str"):
            out[f.name] = chk.string(path, value)
        else:  # pragma: no cover - every field is either scalar or in specials
            out[f.name] = value
    return out


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate a decoded YAML document and build the ``Scenario``; raises ``ScenarioError``."""
    chk = _Checker()
    if not isinstance(data, Mapping):
        raise ScenarioError(source, [f"the file must hold a mapping of fields, got {type(data).__name__}"])
    data = dict(data)
    for alias, name in _OMB_ALIASES.items():
        if alias in data:
            if name in data and alias != name:
                chk.problems.append(f"both '{alias}' and '{name}' are given; keep one")
            value = data.pop(alias)
            if alias == "warmupDurationMinutes" or alias == "testDurationMinutes":
                key = "warmup_s" if alias.startswith("warmup") else "duration_s"
                data[key] = value * 60 if isinstance(value, int | float) else value
            elif alias == "consumerBacklogSizeGB":
                if value not in (0, None):
                    chk.problems.append("consumerBacklogSizeGB is not supported (backlog is measured, not built)")
            else:
                data[name] = value

    def rate(path: str, value: Any) -> float | None:
        if value in (None, "unlimited", -1, 0):
            return None
        v = chk.number(path, value, integer=False, positive=True)
        return v

    def client(path: str, value: Any) -> ClientConfig:
        vals = _fill(chk, path, ClientConfig, value, {})
        vals = {k: v for k, v in vals.items() if v is not None or k == "attempt_timeout_ms"}
        for name in (
            "send_timeout_ms",
            "batch_size",
            "pull_batch_size",
            "pull_threshold_for_queue",
            "max_in_flight",
            "consume_threads",
            "pull_timeout_ms",
        ):
            if name in vals and vals[name] is not None and vals[name] <= 0:
                chk.problems.append(f"{path}.{name} must be > 0, got {vals[name]}")
        if vals.get("attempt_timeout_ms") is not None and vals["attempt_timeout_ms"] <= 0:
            chk.problems.append(f"{path}.attempt_timeout_ms must be > 0, got {vals['attempt_timeout_ms']}")
        if vals.get("batch_size", 1) > 1024:
            chk.problems.append(f"{path}.batch_size must be <= 1024, got {vals['batch_size']}")
        try:
            return ClientConfig(**vals)
        except TypeError as exc:  # pragma: no cover - guarded above
            chk.problems.append(f"{path}: {exc}")
            return ClientConfig()

    def entries(
        path: str, value: Any, cls: type, specials: Mapping[str, Any], required: tuple[str, ...], check: Any = None
    ) -> tuple:
        """A list of `cls` records, each validated by `_fill` and holding its `required` fields;
        `check(path, item)` adds rules of its own."""
        if not isinstance(value, list | tuple):
            chk.problems.append(f"{path} must be a list, got {type(value).__name__}")
            return ()
        out = []
        for i, item in enumerate(value):
            p = f"{path}[{i}]"
            vals = _fill(chk, p, cls, item, specials)
            if isinstance(item, Mapping):
                for req in required:
                    if req not in item:
                        chk.problems.append(f"{p}: missing required field '{req}'")
                if check is not None:
                    check(p, item)
            if all(vals.get(k) is not None for k in required):
                out.append(cls(**{k: v for k, v in vals.items() if v is not None}))
        return tuple(out)

    def faults(path: str, value: Any) -> tuple[BrokerFault, ...]:
        def kind(kp: str, v: Any) -> Any:
            return chk.choice(kp, v, FAULT_KINDS)

        def text(kp: str, v: Any) -> str:
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                chk.problems.append(f"{kp} must be a string or number, got {v!r}")
                return ""
            return str(v)

        return entries(path, value, BrokerFault, {"kind": kind, "value": text}, ("at_s", "kind"))

    def message_faults(path: str, value: Any) -> tuple[MessageFault, ...]:
        def prop(kp: str, v: Any) -> Any:
            return chk.choice(kp, v, MESSAGE_FAULT_PROPERTIES)

        def bounded(p: str, item: Mapping) -> None:
            if not item.get("every") and item.get("max_per_producer") is None and item.get("until_s") is None:
                chk.problems.append(
                    f"{p}: give 'every', 'until_s' or 'max_per_producer', otherwise every message would carry the fault"
                )

        return entries(path, value, MessageFault, {"property": prop}, ("property", "value"), bounded)

    def broker(path: str, value: Any) -> BrokerSpec:
        def conf(cp: str, v: Any) -> dict[str, str]:
            if not isinstance(v, Mapping):
                chk.problems.append(f"{cp} must be a mapping of broker.conf keys, got {type(v).__name__}")
                return {}
            out: dict[str, str] = {}
            for k, item in v.items():
                if isinstance(item, bool):
                    out[str(k)] = "true" if item else "false"
                elif isinstance(item, str | int | float):
                    out[str(k)] = str(item)
                else:
                    chk.problems.append(f"{cp}.{k} must be a scalar, got {item!r}")
            return out

        vals = _fill(chk, path, BrokerSpec, value, {"config": conf})
        return BrokerSpec(**{k: v for k, v in vals.items() if v is not None})

    def debug(path: str, value: Any) -> DebugSpec:
        def seqs(sp: str, v: Any) -> tuple[int, ...]:
            if not isinstance(v, list | tuple) or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v
            ):
                chk.problems.append(f"{sp} must be a list of non-negative integers, got {v!r}")
                return ()
            return tuple(v)

        vals = _fill(chk, path, DebugSpec, value, {"drop_consumed_seqs": seqs})
        return DebugSpec(**{k: v for k, v in vals.items() if v is not None})

    def mode(path: str, value: Any) -> Any:
        return chk.choice(path, value, SEND_MODES)

    def driver(path: str, value: Any) -> Any:
        return chk.choice(path, value, DRIVERS)

    def expect(path: str, value: Any) -> dict[str, Expect]:
        return parse_expect(path, value, chk.problems)

    specials = {
        "producer_rate": rate,
        "client": client,
        "faults": faults,
        "message_faults": message_faults,
        "broker": broker,
        "debug": debug,
        "send_mode": mode,
        "driver": driver,
        "expect": expect,
    }
    if "name" not in data:
        chk.problems.append("missing required field 'name'")
    vals = _fill(chk, "", Scenario, data, specials)
    # Fix the location prefix of top-level messages ("" + name → name).
    chk.problems = [p[1:] if p.startswith(".") else p for p in chk.problems]
    for name in (
        "topics",
        "queues_per_topic",
        "message_size",
        "producers_per_topic",
        "subscriptions_per_topic",
        "tasks",
    ):
        if vals.get(name) is not None and vals[name] <= 0:
            chk.problems.append(f"{name} must be > 0, got {vals[name]}")
    if vals.get("duration_s") is not None and vals["duration_s"] <= 0:
        chk.problems.append(f"duration_s must be > 0, got {vals['duration_s']}")
    if vals.get("message_size") is not None and vals["message_size"] > 4 * 1024 * 1024:
        chk.problems.append(
            f"message_size must be <= 4194304 (the broker's maxMessageSize), got {vals['message_size']}"
        )
    if vals.get("queues_per_topic") is not None and vals["queues_per_topic"] > 1024:
        chk.problems.append(f"queues_per_topic must be <= 1024, got {vals['queues_per_topic']}")
    for name in ("name", "topic_prefix"):
        if vals.get(name) == "":
            chk.problems.append(f"{name} must not be empty")
    prefix = vals.get("topic_prefix")
    if prefix is not None and not all(c.isalnum() or c in "-_%|" for c in prefix):
        chk.problems.append(f"topic_prefix may only hold letters, digits, '-', '_', got {prefix!r}")
    if vals.get("max_messages_per_producer") is not None and vals["max_messages_per_producer"] <= 0:
        chk.problems.append("max_messages_per_producer must be > 0")
    if vals.get("driver") == "grpc" and vals.get("send_mode") in ("oneway", "batch"):
        chk.problems.append(f"driver grpc supports send_mode sync and async only, got {vals['send_mode']!r}")
    if vals.get("driver") == "cpp" and vals.get("send_mode") in ("async", "batch"):
        chk.problems.append(f"driver cpp supports send_mode sync and oneway only, got {vals['send_mode']!r}")
    if chk.problems:
        raise ScenarioError(source, chk.problems)
    vals = {k: v for k, v in vals.items() if v is not None or k in ("producer_rate", "tasks")}
    return Scenario(**vals, source=source)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file; a bare name looks in ``bench/scenarios/``."""
    import yaml  # the bench extra; imported here so the schema itself has no dependency

    p = Path(path)
    if not p.exists() and not p.suffix and p.parent == Path("."):
        candidate = Path(__file__).parent / "scenarios" / f"{p.name}.yaml"
        if candidate.exists():
            p = candidate
    if not p.exists():
        known = ", ".join(sorted(x.stem for x in (Path(__file__).parent / "scenarios").glob("*.yaml")))
        raise ScenarioError(str(path), [f"no such file (bundled scenarios: {known})"])
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ScenarioError(str(p), [f"not valid YAML: {exc}"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(str(p), [f"cannot read: {exc}"]) from None
    return parse_scenario(data, str(p))


def bundled_scenarios() -> list[Path]:
    return sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))
