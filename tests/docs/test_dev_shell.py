"""``./scripts/dev.sh shell``: after it, mqbroker, mqadmin and mqbench are on PATH, as the README says.

The virtualenv is a fresh one made here (``VENV=``), so dev.sh really installs the clone into it; pip runs
offline (``PIP_NO_INDEX``) and finds the dependencies through a ``.pth`` file naming this interpreter's
site-packages, so the test needs no network and never touches the suite's own virtualenv.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("dev-shell") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    (Path(purelib) / "suite_site_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def dev_shell(venv: Path, *command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "VENV": str(venv), "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [str(REPO / "scripts" / "dev.sh"), "shell", *command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_dev_shell_puts_the_commands_on_path(venv, rocketmq_broker):
    proc = dev_shell(
        venv,
        "bash",
        "-c",
        f"command -v mqbroker mqadmin mqbench && mqadmin clusterList -n {rocketmq_broker.namesrv_addr}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == [str(venv / "bin" / name) for name in ("mqbroker", "mqadmin", "mqbench")]
    assert rocketmq_broker.broker_addr in proc.stdout  # mqadmin answered from the live broker
    assert "Traceback" not in proc.stderr


def test_second_run_does_not_install_again(venv):
    first = dev_shell(venv, "true")
    again = dev_shell(venv, "true")
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert "pip install" not in again.stderr
