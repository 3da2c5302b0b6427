"""The drain benchmarks' backlog: exactly the count asked for, and the check that a TPS line measured the backlog
(it ran dry inside the line) rather than the broker."""

from __future__ import annotations

import asyncio

from bench.backlog import LINE_WINDOW_S, drain_ran_dry, fill_backlog
from broker.testing.embedded import EmbeddedBroker
from mqclient.admin import AdminClient


def test_fill_backlog_puts_exactly_count_messages() -> None:
    """8 workers send batches of 32 concurrently; 1000 is no multiple of 32 and would overshoot by up to 7
    batches if a batch were counted only once sent."""

    async def stored(namesrv: str) -> int:
        async with AdminClient(namesrv) as admin:
            (addr,) = (await admin.route_masters("Backlog")).values()
            return sum(s["maxOffset"] - s["minOffset"] for s in (await admin.topic_stats(addr, "Backlog")).values())

    with EmbeddedBroker() as broker:
        asyncio.run(fill_backlog(broker.namesrv_addr, "Backlog", 1000, 64))
        assert asyncio.run(stored(broker.namesrv_addr)) == 1000


def test_a_line_that_could_have_drained_most_of_the_backlog_is_flagged() -> None:
    # the case that misled issue 15: 365k messages left by a 40 s send phase, a "37k msg/s" line
    assert drain_ran_dry(37_140, 365_000)
    assert not drain_ran_dry(77_584, 1_500_000)
    assert drain_ran_dry(0.81 * 1_000_000 / LINE_WINDOW_S, 1_000_000)
