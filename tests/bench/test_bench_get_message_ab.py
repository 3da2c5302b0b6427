"""bench.get_message_ab loads another checkout's MessageReader beside this tree's and prints one line per pull size."""

from __future__ import annotations

from pathlib import Path

from bench.get_message_ab import SIZES, measure

ROOT = Path(__file__).resolve().parents[2]


async def test_compares_two_readers_on_the_same_records(capsys) -> None:
    await measure(ROOT, messages=200, rounds=1)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pull of")]
    assert [int(line.split()[2].rstrip(":")) for line in lines] == list(SIZES)
    assert all("ratio" in line for line in lines)
