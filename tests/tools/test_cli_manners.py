"""Our commands and two user mistakes: a reader that closes the pipe early, and a missing optional extra.

Both must end in at most one line and a conventional exit status, never a traceback. The commands run
as subprocesses (``python -m``), as a user's shell runs them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mqclient import cli_support

REPO = Path(__file__).resolve().parents[2]


def run_into_closed_pipe(args: list[str]) -> subprocess.CompletedProcess:
    """Run ``python args`` with stdout a pipe whose reader is already gone (``| head`` that has exited):
    the first write fails with EPIPE however small the output, so the test does not depend on timing."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)


def test_mqadmin_stats_all_into_a_closed_pipe_is_quiet(rocketmq_broker):
    rocketmq_broker.create_topic("piped", 2)
    proc = run_into_closed_pipe(["-m", "mqclient.mqadmin", "statsAll", "-n", rocketmq_broker.namesrv_addr])
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [["-m", "bench.cli", "scenarios"], ["-m", "broker.main", "--print-config"]])
def test_other_commands_into_a_closed_pipe_are_quiet(args):
    proc = run_into_closed_pipe(args)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


def test_head_reads_a_few_lines_of_stats_all(rocketmq_broker):
    """The issue as reported, through a real shell pipeline."""
    for i in range(3):
        rocketmq_broker.create_topic(f"headed{i}", 1)
    cmd = f"{sys.executable} -m mqclient.mqadmin statsAll -n {rocketmq_broker.namesrv_addr} | head -1"
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.stdout.count("\n") == 1
    assert "Traceback" not in proc.stderr, proc.stderr


# -- missing optional dependencies -------------------------------------------------------------------
HIDE_MODULES = textwrap.dedent("""
    import importlib.abc, sys
    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {hidden!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None
    sys.meta_path.insert(0, Hide())
    import importlib.util
    _find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in {hidden!r} else _find_spec(name, *a)
    sys.argv = {argv!r}
    from {module} import main
    sys.exit(main())
""")


def run_without(hidden: set[str], module: str, argv: list[str]) -> subprocess.CompletedProcess:
    """Run a command as on an install that lacks ``hidden`` (an import hook hides them)."""
    code = HIDE_MODULES.format(hidden=sorted(hidden), argv=argv, module=module)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


def assert_one_line_advice(proc: subprocess.CompletedProcess, prog: str, module: str, extra: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"{prog}: this needs the optional dependency '{module}' (extra [{extra}])"), line
    assert line.endswith(f"-m pip install -e '{REPO}[{extra}]'"), line  # editable install of this clone


@pytest.mark.parametrize(
    "argv", [["mqbench", "scenarios"], ["mqbench", "validate", "smoke"], ["mqbench", "run", "smoke"]]
)
def test_mqbench_without_yaml(argv):
    assert_one_line_advice(run_without({"yaml"}, "bench.cli", argv), "mqbench", "yaml", "bench")


def test_mqbench_run_without_pyarrow_says_so_before_starting_anything():
    proc = run_without({"pyarrow"}, "bench.cli", ["mqbench", "run", "smoke"])
    assert_one_line_advice(proc, "mqbench", "pyarrow", "bench")
    assert "running" not in proc.stderr


def test_mqbroker_prom_metrics_without_prometheus_client():
    proc = run_without(
        {"prometheus_client"},
        "broker.main",
        ["mqbroker", "--set", "metricsExporterType=PROM", "--set", "listenPort=1", "--set", "namesrvListenPort=-1"],
    )
    assert_one_line_advice(proc, "mqbroker", "prometheus_client", "metrics")


def test_install_command_names_this_interpreter_and_clone():
    cmd = cli_support.install_command("bench")
    assert cmd == f"{sys.executable} -m pip install -e '{REPO}[bench]'"
    assert "\nbench = [" in (REPO / "pyproject.toml").read_text()


def test_an_unrelated_missing_module_is_still_a_bug():
    def main() -> int:
        import no_such_module_anywhere  # noqa: F401

        return 0

    with pytest.raises(ModuleNotFoundError):
        cli_support.run_cli("x", main)


def test_outside_a_clone_the_advice_names_the_extras_own_requirements(monkeypatch):
    """An installed package (pipx, a wheel) is not on any index: name what the extra pulls in."""
    monkeypatch.setattr(cli_support, "project_root", lambda: None)
    cmd = cli_support.install_command("bench")
    assert cmd.startswith(f"{sys.executable} -m pip install ")
    assert "pyyaml" in cmd.lower() and "pyspark" in cmd.lower() and "mini-rocketmq" not in cmd


def test_the_console_script_address_of_an_older_install_still_runs_mqadmin():
    # An install made before mqadmin moved keeps a console script importing broker.tools.mqadmin:main.
    from broker.tools.mqadmin import main as old
    from mqclient.mqadmin import main

    assert old is main
