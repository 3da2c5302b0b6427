"""bench.send_tail's arithmetic: stall warnings of a broker log added up, GIL shares from py-spy's raw output."""

from __future__ import annotations

import orjson

from bench.send_tail import gil_shares, report_lines, summarise_stalls


def _stall(gap: float, delay: float, on_cpu: float, stack: str, gc: list | None = None) -> bytes:
    row = {
        "gap_ms": gap,
        "run_delay_ms": delay,
        "on_cpu_ms": on_cpu,
        "gc": gc or [],
        "samples": 3,
        "stacks": [f'3x\n  File "x.py", line 1, in f\n    {stack}\n'],
        "event": "event loop stalled",
        "logger": "broker.loop_stall",
        "level": "warning",
    }
    return orjson.dumps(row)


def test_stalls_are_split_into_machine_busy_and_asleep():
    lines = [
        b'{"event": "loop stall monitor on", "threshold_ms": 3.0}',
        b"not json event loop stalled",
        _stall(40.0, 39.0, 1.0, "poll()"),  # the machine: run delay ~ gap, not held
        _stall(20.0, 2.0, 17.0, "index.put(keys)", gc=[[0, 0.5], [2, 3.0]]),  # busy on the loop
        _stall(12.0, 1.0, 1.0, "return self._loop.run_until_complete(task)"),  # asleep
    ]
    s = summarise_stalls(lines)
    assert s.count == 3
    assert s.gap_ms == 72.0 and s.run_delay_ms == 42.0 and s.on_cpu_ms == 19.0
    assert s.asleep_ms == 0.0 + 1.0 + 10.0
    assert s.held == 2 and s.held_ms == 18.0 + 11.0
    assert s.max_gap_ms == 40.0
    assert s.gc == {0: [1, 0.5], 2: [1, 3.0]}
    assert s.held_stacks == {
        ("busy", "index.put(keys)"): 1,
        ("asleep", "return self._loop.run_until_complete(task)"): 1,
    }
    figures = {"p50_ms": 1.0, "p99_ms": 2.0, "p999_ms": 3.0, "max_ms": 4.0, "tps": 1000.0, "failed": 0}
    text = "\n".join(report_lines(figures, s, {"MainThread": 0.99, "flush": 0.01}, 10.0))
    assert "gen2: 1 (3.0 ms)" in text and "held stall, busy, x1: index.put(keys)" in text
    assert "MainThread 99.0%" in text


def test_gil_shares_per_thread():
    raw = [
        "thread (0x1): MainThread;run (a.py:1);put (b.py:2) 30",
        "thread (0x1): MainThread;run (a.py:1) 10",
        "thread (0x2): flush;sync (c.py:3) 10",
        "",
    ]
    assert gil_shares(raw) == {"MainThread": 0.8, "flush": 0.2}
    assert gil_shares([]) == {}
