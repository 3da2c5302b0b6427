"""What a scenario expects to happen, and the run's verdict against it.

An incident scenario stalls the broker on purpose: its failed sends and busy answers are the point,
not a failure of the run. So a scenario says what it expects under ``expect:`` and the report and the
summary say "as expected" or name what was not::

    expect:
      failed: {min: 1, why: "the stalled append refuses sends with busy answers"}
      busy.REJECTREQUEST: {min: 1}
      lost: 0

Keys: a count of the score (``failed``, ``lost``, ``duplicated``, ``out_of_order``, ``unconsumed``,
``retries``, …), ``busy_total``, ``busy.<KIND>`` (busy answers of that kind, all attempts) or
``errors.<KIND>`` (sends that finally failed with that kind). A value is a number (exactly that), or
``{min: N, max: N, why: text}``. Unless the scenario says otherwise, nothing is lost, duplicated or out
of order, and no send fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULTS: dict[str, dict[str, Any]] = {
    "lost": {"min": 0, "max": 0},
    "duplicated": {"min": 0, "max": 0},
    "out_of_order": {"min": 0, "max": 0},
    "failed": {"min": 0, "max": 0},
}
COUNT_KEYS = (
    "sent",
    "acked",
    "failed",
    "retries",
    "consumed_unique",
    "unconsumed",
    "lost",
    "duplicated",
    "redelivered",
    "duplicates_stored",
    "delivered_unacked",
    "out_of_order",
)


@dataclass(frozen=True, slots=True)
class Expect:
    min: int | None = None
    max: int | None = None
    why: str = ""

    def text(self) -> str:
        if self.min is not None and self.min == self.max:
            return f"{self.min:,}"
        if self.max is None:
            return f"≥ {self.min:,}" if self.min else "any"
        if self.min in (None, 0):
            return f"≤ {self.max:,}"
        return f"{self.min:,}–{self.max:,}"


@dataclass(frozen=True, slots=True)
class Check:
    key: str
    expected: str
    actual: int | None
    ok: bool
    why: str = ""


def key_problem(key: str) -> str | None:
    """Why ``key`` is not an expectation we can check, or None."""
    if key in COUNT_KEYS or key == "busy_total":
        return None
    kind, dot, name = key.partition(".")
    if dot and kind in ("busy", "errors") and name:
        return None
    return f"unknown expectation '{key}' (a count: {', '.join(COUNT_KEYS)}; busy_total; busy.<KIND>; errors.<KIND>)"


def parse_expect(path: str, value: Any, problems: list[str]) -> dict[str, Expect]:
    """The ``expect:`` mapping of a scenario; problems are appended, not raised."""
    if not isinstance(value, Mapping):
        problems.append(f"{path} must be a mapping of expectations, got {type(value).__name__}")
        return {}
    out: dict[str, Expect] = {}
    for key, item in value.items():
        where = f"{path}.{key}"
        problem = key_problem(str(key))
        if problem is not None:
            problems.append(f"{where}: {problem}")
            continue
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            out[str(key)] = Expect(item, item)
            continue
        if not isinstance(item, Mapping) or not set(item) <= {"min", "max", "why"} or not ({"min", "max"} & set(item)):
            problems.append(f"{where} must be a count or {{min: N, max: N, why: text}}, got {item!r}")
            continue
        bounds = {k: item.get(k) for k in ("min", "max")}
        if any(v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0) for v in bounds.values()):
            problems.append(f"{where}: min and max must be non-negative integers, got {item!r}")
            continue
        if bounds["min"] is not None and bounds["max"] is not None and bounds["min"] > bounds["max"]:
            problems.append(f"{where}: min {bounds['min']} is above max {bounds['max']}")
            continue
        out[str(key)] = Expect(bounds["min"], bounds["max"], str(item.get("why") or ""))
    return out


def actual(score: Mapping[str, Any], key: str) -> int | None:
    counts = score.get("counts") or {}
    errors = score.get("errors") or {}
    if key == "busy_total":
        return int(errors.get("busy_total") or 0)
    kind, dot, name = key.partition(".")
    if dot and kind == "busy":
        return int((errors.get("busy") or {}).get(name, 0))
    if dot and kind == "errors":
        return int((errors.get("final_by_kind") or {}).get(name, 0))
    value = counts.get(key, 0)
    return None if value is None else int(value)


def evaluate(score: Mapping[str, Any]) -> list[Check]:
    """Every expectation of the score's scenario (with the defaults it does not override), checked."""
    declared = (score.get("scenario") or {}).get("expect") or {}
    merged: dict[str, Expect] = {k: Expect(**v) for k, v in DEFAULTS.items()}
    for key, spec in declared.items():
        merged[key] = spec if isinstance(spec, Expect) else Expect(**dict(spec))
    checks = []
    for key, spec in merged.items():
        got = actual(score, key)
        ok = got is not None and (spec.min is None or got >= spec.min) and (spec.max is None or got <= spec.max)
        checks.append(Check(key, spec.text(), got, ok, spec.why))
    return checks


def verdict_line(checks: list[Check]) -> str:
    """One line: "as expected (…)" or "NOT as expected: failed 298 (expected 0), …"."""
    bad = [c for c in checks if not c.ok]
    if not bad:
        return "as expected: " + ", ".join(f"{c.key} {_n(c.actual)}" for c in checks)
    return "NOT as expected: " + ", ".join(f"{c.key} {_n(c.actual)} (expected {c.expected})" for c in bad)


def _n(v: int | None) -> str:
    return "unknown" if v is None else f"{v:,}"
