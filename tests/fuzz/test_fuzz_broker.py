"""The seeded fuzz test: 16,000 malformed and mutated frames (FUZZ_FRAMES for more) against a real broker subprocess.

Framing, JSON and ROCKETMQ headers, bodies of every request code (served or not) and mutants of frames
recorded from the C++ wheel and ali-ons (``tests/fuzz/corpus``) go to the broker port and its embedded name
server's port over raw loopback connections (``bench.fuzz_campaign``). Afterwards the process must be alive
and answering, a C++ wheel round trip must lose nothing, the broker log must hold no traceback (a client's
mistake costs a warning line, never a traceback), nothing may be made of an illegal name, and SIGTERM must
exit 0. The seed is fixed so CI is deterministic; the failure message prints the command that replays it.
"""

from __future__ import annotations

import os

import pytest

from bench.fuzz_campaign import run_campaign

pytestmark = [pytest.mark.compat, pytest.mark.slow]

#: FUZZ_SEED / FUZZ_FRAMES replay a failing campaign or run a longer one through pytest.
SEED = int(os.environ.get("FUZZ_SEED", "20261124"))
FRAMES = int(os.environ.get("FUZZ_FRAMES", "16000"))


@pytest.mark.timeout(240)
def test_broker_survives_a_seeded_fuzz_campaign(tmp_path):
    result = run_campaign(tmp_path, seed=SEED, frames=FRAMES)
    report = result.report()
    print(report)
    assert result.stats.frames == FRAMES
    # Every family got through: a generator that stopped producing some kind of frame would pass vacuously.
    assert set(result.stats.by_family) == {"framing", "header", "body", "corpus", "valid"}, report
    assert result.ok, f"fuzz seed {SEED} (replay: FUZZ_SEED={SEED} FUZZ_FRAMES={FRAMES} pytest {__file__})\n{report}"
