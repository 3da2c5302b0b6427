"""The consume A/B script's drain accounting: a round's CPU a drained message, the cores each process took, and the
bound a broker of no CPU could reach (what says whether the drain goal is a broker's to meet at all)."""

from __future__ import annotations

import os

import pytest

from bench import consume_ab
from bench.consume_ab import DrainCpu, Target


def _round(rate: float, broker_us: float, consumer_us: float) -> DrainCpu:
    return DrainCpu(rate * 10, 10.0, broker_us / 2, broker_us / 2, consumer_us, 0.95)


def test_a_round_gives_each_process_its_cores_and_the_bound_of_a_broker_of_no_cpu() -> None:
    split = DrainCpu(900_000, 10.0, 2.5, 1.5, 15.0, 0.97)
    assert split.broker_us == 4.0
    assert split.rate == 90_000
    assert split.cores(split.broker_us) == pytest.approx(0.36)
    assert split.cores(split.consumer_us) == pytest.approx(1.35)
    # the consumer given the broker's 0.36 cores too, at its 15 us a message
    assert split.bound == pytest.approx((1.35 + 0.36) / 1.35)
    line = split.line()
    assert "broker 4.0 (user 2.5, sys 1.5), consumer 15.0" in line
    assert "cores broker 0.36, consumer 1.35" in line and "97% busy" in line and "x1.27" in line


def test_a_consumer_that_used_no_cpu_has_no_bound() -> None:
    assert DrainCpu(1_000, 10.0, 1.0, 1.0, 0.0, 0.1).bound == 0.0


def test_the_report_names_each_targets_bound_from_its_median_round() -> None:
    ours = Target("ours", None, drain=[90_000, 80_000, 100_000])  # type: ignore[arg-type]
    ours.drain_split = [_round(90_000, 4.0, 15.0), _round(80_000, 8.0, 16.0), _round(100_000, 4.0, 14.0)]
    java = Target("java", None, drain=[60_000, 65_000])  # type: ignore[arg-type]
    java.drain_split = [_round(60_000, 10.0, 17.0), _round(65_000, 9.0, 17.0)]
    nothing = Target("idle", None)  # type: ignore[arg-type]
    lines = consume_ab.drain_bounds([ours, java, nothing])
    assert len(lines) == 2
    ours_bound = sorted(s.bound for s in ours.drain_split)[1]
    java_bound = sorted(s.bound for s in java.drain_split)
    java_median = (java_bound[0] + java_bound[1]) / 2
    assert lines[0].startswith(
        f"drain bound, ours: a broker of no CPU x{ours_bound:.2f} (median), {90_000 * ours_bound:,.0f}"
    )
    assert lines[1].startswith(f"drain bound, java: a broker of no CPU x{java_median:.2f}")
    assert "the consumer's CPU 17.0 us a drained message" in lines[1] and "62,500 msg/s over the windows" in lines[1]
    assert "busy" not in lines[0]  # (every round at 95 %: CPU-bound)
    idle = Target("idle", None, drain=[58_000])  # type: ignore[arg-type]
    idle.drain_split = [DrainCpu(580_000, 10.0, 2.0, 1.5, 11.0, 0.5)]
    (line,) = consume_ab.drain_bounds([idle])
    assert line.endswith(
        "the machine 50% busy: not CPU-bound, the consumer waits on itself, and no broker's CPU lifts that"
    )
    report = consume_ab.report([ours, java], 1_200_000)
    assert "drain: CPU us/drained msg broker 4.0" in report and "drain bound, java" in report
    assert "broker CPU per drained message, us (each round): 4.00, 8.00, 4.00" in report


def test_cpu_times_split_user_and_system() -> None:
    user, system = consume_ab.cpu_times(os.getpid())
    assert user > 0 and system >= 0
    assert consume_ab.cpu_seconds(os.getpid()) >= user + system


def test_the_busy_share_is_busy_jiffies_over_all_between_two_readings() -> None:
    assert consume_ab.busy_share((100, 1_000), (190, 1_100)) == 0.9
    assert consume_ab.busy_share((5, 10), (5, 10)) == 0.0  # (no tick between them: no division by zero)
