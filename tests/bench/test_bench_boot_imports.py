"""bench.boot_imports: one run of a tree times the start's imports in a fresh interpreter of that tree."""

from __future__ import annotations

from bench.boot_figures import REPO
from bench.boot_imports import one_run


def test_one_run_reports_the_cpu_seconds_of_the_start_imports():
    seconds = one_run(REPO)
    assert 0.0 < seconds < 30.0
