"""``bench.first_sends``: one round on two fresh brokers of this checkout prints each round and the medians."""

from __future__ import annotations

from pathlib import Path

from bench import first_sends

ROOT = Path(__file__).resolve().parents[2]


def test_one_round_of_two_brokers_prints_rounds_and_medians(capsys):
    assert (
        first_sends.main(
            ["--a", str(ROOT), "--b", str(ROOT), "--rounds", "1", "--burst", "16", "--tasks", "4", "--lead-ms", "50"]
        )
        == 0
    )
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("round", "median"))]
    assert [line.split(":")[0] for line in out] == [
        "round 1 a",
        "round 1 b",
        "median first_ms",
        "median burst_max_ms",
        "median failed",
    ]
    assert "failed 0.0" in out[0] and "failed 0.0" in out[1]
