"""The one-vs-N-brokers benchmark's pieces: its hand-built cluster really is one cluster behind one name server,
its quiet-machine model does the arithmetic the design notes quote, and a machine without the reference tools
gets a skip line."""

from __future__ import annotations

import asyncio

import pytest

from bench import cluster_scale
from bench.cluster_scale import LocalCluster, Phase, Round, ceiling
from mqclient.admin import AdminClient


def test_local_cluster_serves_one_route_over_every_broker(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, 2).start()
    try:

        async def check() -> None:
            await cluster_scale._prepare(cluster.namesrv, ["ScaleCheck"], 2)
            async with AdminClient(cluster.namesrv) as admin:
                brokers = await admin.brokers()
                route = await admin.route("ScaleCheck")
            assert [b.broker_name for b in brokers] == ["broker-a", "broker-b"]
            assert len({b.master for b in brokers}) == 2
            assert route is not None and len(route.write_queues()) == 16

        asyncio.run(check())
        assert set(cluster.pids()) == {"broker-a", "broker-b"}
    finally:
        cluster.stop()
    assert all(b.exit_codes[-1:] == [0] for b in cluster.brokers)


def test_cpu_cost_per_message_and_the_quiet_machine_model() -> None:
    # 10 s at one full core for the broker and half a core for the client, 70,000 messages
    phase = Phase(cpu={"broker-a": 1.0, "java": 0.5}, messages=70_000, seconds=10.0)
    assert phase.cpu_us_per_message("broker") == pytest.approx(142.86, abs=0.01)
    assert phase.cpu_us_per_message("java") == pytest.approx(71.43, abs=0.01)
    # one broker: its one core binds (7,000/s) before the two cores do (9,333/s)
    assert ceiling(phase, 1, 2) == pytest.approx(7000, rel=1e-6)
    # two brokers at the same costs: only the two cores bind
    assert ceiling(phase, 2, 2) == pytest.approx(2e6 / (142.857 + 71.429), rel=1e-4)
    # the client's cost measured at the ceiling's rate replaces the phase's own
    assert ceiling(phase, 2, 2, client_us=30.0) == pytest.approx(2e6 / (142.857 + 30), rel=1e-4)
    assert Phase().cpu_us_per_message("broker") is None


def test_pair_ratios_compare_adjacent_rounds() -> None:
    rounds = [Round("1 broker"), Round("2 brokers"), Round("1 broker"), Round("2 brokers")]
    for r, tps in zip(rounds, (1000.0, 1500.0, 2000.0, 1000.0)):
        r.send.tps = tps
    assert cluster_scale._pair_ratios(rounds, "send") == [1.5, 0.5]
    assert cluster_scale._pair_ratios(rounds, "drain") == []


def test_missing_reference_tools_skip_cleanly(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cluster_scale.main(["--rmq-bin", str(tmp_path / "nowhere")]) == 0
    assert capsys.readouterr().out.startswith("skipped: Apache RocketMQ 4.9.7 tools not found")
