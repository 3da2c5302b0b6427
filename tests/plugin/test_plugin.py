"""The pytest plugin as a user meets it: the sample suite in ``sample/`` run by a fresh pytest process.

Each run copies the sample files into a temporary project with its own ``pytest.ini``, so scope and
broker.conf settings are the user's, and the plugin is found the way a user's run finds it (the
``pytest11`` entry point when the project is installed, ``-p broker.testing.pytest_plugin`` otherwise).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parent / "sample"
REPO = Path(__file__).resolve().parents[2]


def plugin_installed() -> bool:
    # by name: an install made before the plugin moved still names broker.pytest_plugin (a shim), and loading
    # the plugin a second time with -p would register its options twice
    return any(ep.name == "mini_rocketmq" for ep in importlib.metadata.entry_points(group="pytest11"))


def run_sample(tmp_path: Path, files: list[str], ini: str = "", *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    project = tmp_path / "project"
    project.mkdir()
    for name in files:
        shutil.copy(SAMPLE / name, project / name)
    (project / "pytest.ini").write_text(
        "[pytest]\npython_files = sample_*.py\nasyncio_mode = auto\n"
        "asyncio_default_fixture_loop_scope = function\n" + ini
    )
    report = tmp_path / "report.txt"
    report.touch()
    env = {
        **os.environ,
        "SAMPLE_REPORT": str(report),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *args]
    if not plugin_installed():
        cmd += ["-p", "broker.testing.pytest_plugin"]
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
    return proc, report


def outcome(proc: subprocess.CompletedProcess) -> dict[str, int]:
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error|errors)", last)}


def test_entry_point_is_declared():
    text = (REPO / "pyproject.toml").read_text()
    assert '[project.entry-points.pytest11]\nmini_rocketmq = "broker.testing.pytest_plugin"' in text


def test_sample_suite_passes_and_starts_fast(tmp_path):
    proc, report = run_sample(tmp_path, ["sample_basic.py"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = outcome(proc)
    assert counts.get("passed", 0) + counts.get("skipped", 0) == 8 and "failed" not in counts, proc.stdout
    [start] = [float(line.split()[1]) for line in report.read_text().splitlines() if line.startswith("start_")]
    print(f"embedded broker start: {start * 1000:.0f} ms")
    assert start < 2.0  # ~0.1 s measured; generous for a loaded 2-core machine


@pytest.mark.parametrize(
    "ini, args, distinct, name",
    [
        ("", (), 3, "broker-a"),
        ("rocketmq_broker_scope = module\nrocketmq_broker_config =\n    brokerName=from-ini\n", (), 1, "from-ini"),
        ("rocketmq_broker_scope = module\n", ("--rocketmq-broker-scope=class",), 3, "broker-a"),
    ],
)
def test_scope_and_broker_config_are_configurable(tmp_path, ini, args, distinct, name):
    """Three tests (two functions, one in a class): the number of distinct brokers they saw."""
    proc, report = run_sample(tmp_path, ["sample_scope.py"], ini, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = [line.split() for line in report.read_text().splitlines()]
    assert len(seen) == 3 and len({addr for addr, _ in seen}) == distinct
    assert {n for _, n in seen} == {name}


def test_marker_with_a_wide_scope_fails_clearly(tmp_path):
    proc, _ = run_sample(tmp_path, ["sample_bad_marker.py"], "rocketmq_broker_scope = session\n")
    assert proc.returncode == 1
    assert "rocketmq_broker_config needs the function-scoped rocketmq_broker" in proc.stdout


@pytest.mark.parametrize(
    "ini, message",
    [
        ("rocketmq_broker_scope = galaxy\n", "rocketmq_broker_scope must be one of"),
        ("rocketmq_broker_config =\n    noSuchKey=1\n", "unknown configuration key 'noSuchKey'"),
    ],
)
def test_bad_settings_are_reported(tmp_path, ini, message):
    proc, _ = run_sample(tmp_path, ["sample_scope.py"], ini)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


class FakeConfig:
    def __init__(self, ini: dict, option=None) -> None:
        self.ini, self.option = ini, option

    def getini(self, name):
        return self.ini.get(name, [] if name == "rocketmq_broker_config" else "")

    def getoption(self, name, default=None):
        return self.option if self.option is not None else default


def test_settings_parsing_units():
    from broker.testing import pytest_plugin

    assert pytest_plugin._scope("rocketmq_broker", FakeConfig({})) == "function"
    assert pytest_plugin._scope("rocketmq_broker", FakeConfig({"rocketmq_broker_scope": " Session "})) == "session"
    assert pytest_plugin._scope("rocketmq_broker", FakeConfig({"rocketmq_broker_scope": "module"}, "class")) == "class"
    lines = ["# comment", "", "brokerName = x", "maxMessageSize=1024"]
    assert pytest_plugin._ini_config(FakeConfig({"rocketmq_broker_config": lines})) == {
        "brokerName": "x",
        "maxMessageSize": "1024",
    }
    with pytest.raises(pytest.UsageError, match="expected key=value"):
        pytest_plugin._ini_config(FakeConfig({"rocketmq_broker_config": ["justakey"]}))


def test_the_old_plugin_address_serves_every_hook_and_fixture():
    # An install made before the move loads broker.pytest_plugin through its stale entry point.
    import broker.pytest_plugin as old
    from broker.testing import pytest_plugin as new

    wanted = {name for name in vars(new) if name.startswith(("pytest_", "rocketmq_broker"))}
    assert wanted >= {"pytest_addoption", "rocketmq_broker", "rocketmq_broker_factory"}
    assert {name: getattr(old, name, None) for name in wanted} == {name: getattr(new, name) for name in wanted}
