"""Watch the C++ wheel's native start/shutdown calls: how many run at the same moment.

librocketmq 1.2.x corrupts its process-wide client factory table when two of these calls overlap, and the
process dies with SIGSEGV at a later start (see bench/cpp_lifecycle.py). Each wrapped call is stretched by
`stretch_s`, so two callers that are not serialized overlap for certain instead of once in a thousand runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

LIFECYCLE_CALLS = (
    "StartProducer",
    "ShutdownProducer",
    "StartPushConsumer",
    "ShutdownPushConsumer",
    "StartPullConsumer",
    "ShutdownPullConsumer",
)


class LifecycleProbe:
    def __init__(self, stretch_s: float = 0.1) -> None:
        self.stretch_s = stretch_s
        self.calls: list[str] = []
        self.active = 0
        self.max_active = 0
        #: Set to make ShutdownProducer block until it is cleared (a hung shutdown).
        self.hold_shutdown = threading.Event()
        self.release_shutdown = threading.Event()
        self._lock = threading.Lock()
        self._shut_down: set[Any] = set()
        self._started: set[Any] = set()  # the handles started while installed: only their shutdowns are counted

    def install(self, monkeypatch: pytest.MonkeyPatch) -> LifecycleProbe:
        from rocketmq.ffi import dll

        for name in LIFECYCLE_CALLS:
            monkeypatch.setattr(dll, name, self._wrap(name, getattr(dll, name)))
        return self

    def _wrap(self, name: str, native: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            handle = args[0] if args else None
            if name.startswith("Shutdown") and (handle in self._shut_down or handle not in self._started):
                # the wheel's __del__ shuts down again (a no-op in librocketmq), or a client that an earlier test of
                # this process started is collected now (its __del__ shuts it down): not the test's calls
                return native(*args)
            if name.startswith("Shutdown"):
                self._shut_down.add(handle)
            else:
                self._started.add(handle)
            with self._lock:
                self.active += 1
                self.max_active = max(self.max_active, self.active)
                self.calls.append(name)
            try:
                time.sleep(self.stretch_s)
                if name == "ShutdownProducer" and self.hold_shutdown.is_set():
                    self.release_shutdown.wait(30)
                return native(*args)
            finally:
                with self._lock:
                    self.active -= 1

        return call
