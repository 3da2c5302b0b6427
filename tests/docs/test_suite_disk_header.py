"""tests/conftest.py's report header: a disk past the store's disk-full mark is named before any test runs, so that
a run whose brokers refuse every put for the machine's disk is told apart from a broken build."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import store.clean


def _suite_conftest():
    spec = importlib.util.spec_from_file_location("suite_conftest", Path(__file__).parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.parametrize(("used", "warned"), [(0.46, False), (0.90, False), (0.93, True)])
def test_header_warns_past_the_disk_full_mark(monkeypatch, used, warned):
    monkeypatch.setattr(store.clean, "disk_used_ratio", lambda path: used)
    lines = _suite_conftest().pytest_report_header(None)
    assert lines[0].startswith("disk: ") and f"{used:.0%} used" in lines[0]
    assert any(line.startswith("WARNING:") and "disk-full mark" in line for line in lines) == warned
