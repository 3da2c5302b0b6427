"""docker/entrypoint.sh: container environment and mounted broker.conf → one mqbroker command line.

Runs the real script with a fake ``mqbroker`` first on PATH that prints the arguments it got as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
DEFAULT_CONF = Path("/etc/mini-rocketmq/broker.conf")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the entrypoint is a bash script")

DEFAULTS = [
    "--set",
    "brokerIP1=127.0.0.1",
    "--set",
    "storePathRootDir=/home/rocketmq/store",
    "--set",
    "brokerName=broker-a",
]


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mqbroker"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\"\n")
    fake.chmod(0o755)
    return bin_dir


def run(
    fake_bin: Path,
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    # A clean environment: only what the test sets, so a developer's own variables cannot leak in.
    full_env = {"PATH": f"{fake_bin}:/usr/bin:/bin", **(env or {})}
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *(args or [])], env=full_env, capture_output=True, text=True, timeout=20, check=False
    )


def argv_of(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def no_default_conf() -> None:
    if DEFAULT_CONF.exists():
        pytest.skip(f"{DEFAULT_CONF} exists on this machine and would be picked up")


def test_defaults_when_nothing_is_configured(fake_bin: Path, no_default_conf: None) -> None:
    assert argv_of(run(fake_bin)) == DEFAULTS


def test_broker_ip1_variable_replaces_the_default(fake_bin: Path, no_default_conf: None) -> None:
    argv = argv_of(run(fake_bin, {"ROCKETMQ_BROKER_IP1": "192.0.2.7"}))
    assert argv == [
        "--set",
        "storePathRootDir=/home/rocketmq/store",
        "--set",
        "brokerName=broker-a",
        "--set",
        "brokerIP1=192.0.2.7",
    ]


def test_broker_conf_variables_become_sets_in_name_order(fake_bin: Path, no_default_conf: None) -> None:
    env = {
        "BROKER_CONF_listenPort": "20911",
        "BROKER_CONF_flushDiskType": "SYNC_FLUSH",
        # Spaces, "=" and quotes survive as one argument.
        "BROKER_CONF_messageDelayLevel": "1s 5s 'x'=y",
        "NOT_BROKER_CONF_brokerId": "3",
    }
    argv = argv_of(run(fake_bin, env))
    assert argv == DEFAULTS + [
        "--set",
        "flushDiskType=SYNC_FLUSH",
        "--set",
        "listenPort=20911",
        "--set",
        "messageDelayLevel=1s 5s 'x'=y",
    ]


def test_env_for_a_defaulted_key_suppresses_the_default(fake_bin: Path, no_default_conf: None) -> None:
    argv = argv_of(run(fake_bin, {"BROKER_CONF_storePathRootDir": "/data", "BROKER_CONF_brokerIP1": "10.1.2.3"}))
    assert argv == ["--set", "brokerName=broker-a", "--set", "brokerIP1=10.1.2.3", "--set", "storePathRootDir=/data"]


def test_mounted_conf_comes_first_and_its_keys_are_not_overridden_by_defaults(fake_bin: Path, tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# brokerName=commented-out\nbrokerIP1 = 198.51.100.4\nstorePathRootDir:/srv/store\n")
    argv = argv_of(run(fake_bin, {"MINI_ROCKETMQ_CONF": str(conf), "BROKER_CONF_listenPort": "1234"}))
    # brokerName only appears commented out, so its default still applies.
    assert argv == ["-c", str(conf), "--set", "brokerName=broker-a", "--set", "listenPort=1234"]


def test_conf_key_prefix_of_another_key_does_not_count(fake_bin: Path, tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerNameSuffix=x\n")
    argv = argv_of(run(fake_bin, {"MINI_ROCKETMQ_CONF": str(conf)}))
    assert argv == ["-c", str(conf)] + DEFAULTS


def test_container_arguments_come_last(fake_bin: Path, no_default_conf: None) -> None:
    argv = argv_of(run(fake_bin, {"ROCKETMQ_BROKER_IP1": "192.0.2.7"}, ["--set", "brokerIP1=203.0.113.1", "-p"]))
    assert argv[-3:] == ["--set", "brokerIP1=203.0.113.1", "-p"]
    assert argv.index("brokerIP1=192.0.2.7") < argv.index("brokerIP1=203.0.113.1")


def test_a_command_is_run_instead_of_the_broker(fake_bin: Path) -> None:
    proc = run(fake_bin, {"BROKER_CONF_listenPort": "1"}, ["echo", "hello", "world"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello world\n"


def test_missing_explicit_conf_is_a_clear_error(fake_bin: Path, tmp_path: Path) -> None:
    proc = run(fake_bin, {"MINI_ROCKETMQ_CONF": str(tmp_path / "nope.conf")})
    assert proc.returncode == 2
    assert "nope.conf: no such file" in proc.stderr
    assert proc.stdout == ""


def test_unreadable_conf_is_a_clear_error(fake_bin: Path, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=x\n")
    conf.chmod(0)
    proc = run(fake_bin, {"MINI_ROCKETMQ_CONF": str(conf)})
    assert proc.returncode == 2
    assert "not readable" in proc.stderr


def test_empty_key_is_a_clear_error(fake_bin: Path, no_default_conf: None) -> None:
    proc = run(fake_bin, {"BROKER_CONF_": "x"})
    assert proc.returncode == 2
    assert "BROKER_CONF_ needs a broker.conf key" in proc.stderr
