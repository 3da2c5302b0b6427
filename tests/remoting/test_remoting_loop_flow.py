"""loop.py (uvloop choice) and FlowControl (read pause reasons) on their own."""

from __future__ import annotations

import asyncio
import os

import pytest

from remoting import loop as rloop
from remoting.flow_control import FlowControl


class FakeTransport:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.closing = False

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def is_closing(self) -> bool:
        return self.closing


def test_reading_pauses_for_either_reason_and_resumes_when_both_clear() -> None:
    t = FakeTransport()
    flow = FlowControl(t)  # type: ignore[arg-type]
    flow.pause_writing()
    flow.set_busy(True)
    assert flow.read_paused and t.calls == ["pause"]
    flow.resume_writing()
    assert flow.read_paused and t.calls == ["pause"]  # still busy
    flow.set_busy(False)
    assert not flow.read_paused and t.calls == ["pause", "resume"]
    flow.set_busy(False)
    flow.resume_writing()
    assert t.calls == ["pause", "resume"]  # no redundant calls


def test_closing_transport_is_left_alone() -> None:
    t = FakeTransport()
    t.closing = True
    flow = FlowControl(t)  # type: ignore[arg-type]
    flow.pause_writing()
    assert flow.read_paused and t.calls == []


def test_new_event_loop_prefers_uvloop() -> None:
    loop = rloop.new_event_loop()
    try:
        assert type(loop).__module__.startswith("uvloop") == rloop.uvloop_available()
    finally:
        loop.close()


def test_install_sets_the_policy() -> None:
    old = asyncio.get_event_loop_policy()
    try:
        assert rloop.install() == rloop.uvloop_available()
        if rloop.uvloop_available():
            assert type(asyncio.get_event_loop_policy()).__module__.startswith("uvloop")
    finally:
        asyncio.set_event_loop_policy(old)


@pytest.mark.skipif(os.environ.get("REMOTING_TEST_LOOP") == "asyncio", reason="standard loop requested")
async def test_remoting_tests_run_on_uvloop() -> None:
    assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
