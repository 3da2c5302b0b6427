"""DataVersion: a counter plus timestamp that tells name servers and tools a table changed."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class DataVersion:
    timestamp: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    counter: int = 0

    def next_version(self, now_ms: Callable[[], int] | None = None) -> None:
        self.timestamp = now_ms() if now_ms else time.time_ns() // 1_000_000
        self.counter += 1

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> DataVersion:
        if not data:
            return cls()
        counter = data.get("counter", 0)
        if isinstance(counter, dict):  # AtomicLong serialized by some fastjson versions
            counter = counter.get("value", 0)
        return cls(timestamp=int(data.get("timestamp", 0)), counter=int(counter))
