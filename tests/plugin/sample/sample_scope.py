"""Which broker each test got: the outer test counts distinct addresses to check the fixture's scope."""

from __future__ import annotations

import os


def _record(broker) -> None:
    with open(os.environ["SAMPLE_REPORT"], "a") as f:
        f.write(f"{broker.broker_addr} {broker.broker_name}\n")


def test_one(rocketmq_broker):
    _record(rocketmq_broker)


def test_two(rocketmq_broker):
    _record(rocketmq_broker)


class TestThree:
    def test_three(self, rocketmq_broker):
        _record(rocketmq_broker)
