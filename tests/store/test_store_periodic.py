"""store/periodic.py: the clean service's and the stats sampler's loop; a failing pass is logged, the chore goes on."""

from __future__ import annotations

import asyncio

import structlog

from store.periodic import Periodic


async def test_a_failing_pass_is_logged_once_and_the_chore_goes_on():
    runs: list[int] = []

    def run() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise OSError("disk went away")

    chore = Periodic("test-chore", run, lambda: 0.001)
    with structlog.testing.capture_logs() as logs:
        chore.start()
        chore.start()  # a second start is a no-op, not a second loop
        for _ in range(200):
            if len(runs) >= 3:
                break
            await asyncio.sleep(0.005)
        await chore.stop()
    assert len(runs) >= 3
    failures = [e for e in logs if e["event"] == "store chore failed"]
    assert len(failures) == 1 and failures[0]["chore"] == "test-chore"
    assert not chore.running
    stopped_at = len(runs)
    await asyncio.sleep(0.02)
    assert len(runs) == stopped_at
    await chore.stop()  # stopping twice is harmless
