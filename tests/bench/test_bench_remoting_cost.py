"""bench.remoting_cost: the remoting layer alone answers every send of each read (both serializations) and prints
a per-request figure for each tree, and their ratio."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.remoting_cost import main, measure

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("serialize", [0, 1])
async def test_measures_a_positive_cost_per_request(serialize: int) -> None:
    assert 0 < await measure(serialize, reads=5, reps=2) < 10_000


def test_compares_two_trees(capsys) -> None:
    assert main(["--a", str(ROOT), "--b", str(ROOT), "--rounds", "1", "--reads", "5", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    assert "round 0 A:" in out and "round 0 B:" in out and "B/A = " in out
