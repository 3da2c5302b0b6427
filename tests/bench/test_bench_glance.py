"""The report and the CLI answer at a glance: what ran, what was expected, what happened, versus last run.

Scenarios declare what they expect (``expect:``, bench.expect); an incident's busy answers are then
"as expected", not a red failure banner. The report is also looked at as a user would: rendered by
headless Chromium into a PNG (skipped where Chromium is not installed).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.cli import scenarios_table
from bench.expect import evaluate, parse_expect, verdict_line
from bench.report import _run_span, find_previous, write_report
from bench.scenario import ScenarioError, bundled_scenarios, load_scenario, parse_scenario


def score_of(
    scenario: dict,
    *,
    failed: int = 298,
    busy: int = 298,
    lost: int | None = 0,
    started: str = "2026-11-24T14:41:16+0000",
    rate: float = 64.0,
) -> dict:
    return {
        "scenario": parse_scenario(scenario).to_dict(),
        "run": {"run_id": "r", "started_at": started},
        "counts": {
            "sent": 439,
            "acked": 141,
            "failed": failed,
            "consumed_unique": 141,
            "lost": lost,
            "duplicated": 0,
            "out_of_order": 0,
            "accounted": True,
            "retries": 0,
        },
        "publish": {"rate_msg_s": rate, "latency_ms": {"p50": 1.4, "p99": 919.8, "max": 1498.0}},
        "consume": {},
        "end_to_end": {"latency_ms": {"p50": 2.0, "p99": 918.0}},
        "errors": {
            "all_by_kind": {"REJECTREQUEST": busy},
            "final_by_kind": {"REJECTREQUEST": failed},
            "busy": {"REJECTREQUEST": busy},
            "busy_total": busy,
        },
        "backlog": {"max": 0},
        "broker": {},
        "client": {},
    }


SERIES = {
    "second": [0, 1, 2],
    "sent": [39, 33, 367],
    "acked": [39, 1, 101],
    "consumed": [39, 1, 101],
    "publish_p50_ms": [2.8, 1.3, 1.1],
    "publish_p99_ms": [60.0, None, 1492.0],
    "e2e_p50_ms": [5, 3, 1],
    "e2e_p99_ms": [55, None, 1494],
    "errors": {"REJECTREQUEST": [0, 0, 268]},
    "backlog": [0, 0, 0],
    "faults": [{"t": 0.0, "kind": "stall_append"}],
}

INCIDENT = {
    "name": "stall",
    "duration_s": 5,
    "warmup_s": 1,
    "faults": [{"at_s": 1, "kind": "stall_append"}],
    "expect": {"failed": {"min": 1, "why": "busy answers are not retried"}, "busy.REJECTREQUEST": {"min": 1}},
}


def test_defaults_count_any_failure_as_unexpected():
    checks = evaluate(score_of({"name": "plain"}))
    assert {c.key: c.ok for c in checks} == {"lost": True, "duplicated": True, "out_of_order": True, "failed": False}
    assert verdict_line(checks) == "NOT as expected: failed 298 (expected 0)"


def test_an_incident_that_declares_its_failures_is_as_expected():
    checks = evaluate(score_of(INCIDENT))
    assert all(c.ok for c in checks), checks
    assert verdict_line(checks).startswith("as expected: ")
    assert [c.why for c in checks if c.key == "failed"] == ["busy answers are not retried"]
    quiet = evaluate(score_of(INCIDENT, failed=0, busy=0))  # the stall did not bite: that is news too
    assert verdict_line(quiet) == ("NOT as expected: failed 0 (expected ≥ 1), busy.REJECTREQUEST 0 (expected ≥ 1)")
    unknown = evaluate(score_of(INCIDENT, lost=None))
    assert "lost unknown (expected 0)" in verdict_line(unknown)


def test_expect_is_validated_with_clear_problems():
    problems: list[str] = []
    parse_expect("expect", {"failed": -1, "lots": 1, "busy.X": {"min": 3, "max": 1}, "lost": {"mni": 1}}, problems)
    assert len(problems) == 4, problems
    assert any("unknown expectation 'lots'" in p for p in problems)
    with pytest.raises(ScenarioError, match="expect.failed must be a count"):
        parse_scenario({"name": "x", "expect": {"failed": "many"}})


@pytest.mark.parametrize("path", bundled_scenarios(), ids=lambda p: p.stem)
def test_bundled_incidents_declare_what_they_expect(path):
    scen = load_scenario(path)
    again = parse_scenario({k: v for k, v in scen.to_dict().items() if k != "source"})  # a task's round trip
    assert again.expect == scen.expect
    if scen.name.startswith("incident-") and scen.name != "incident-large-messages-slow-consumer":
        assert scen.expect and all(e.why for e in scen.expect.values())


def test_scenarios_table_is_aligned_and_cuts_nothing():
    paths = bundled_scenarios()
    for width in (80, 120, 200):
        text = scenarios_table(paths, width)
        lines = text.splitlines()
        assert all(len(line) <= max(width, 100) for line in lines), width
        column = lines[0].index("DESCRIPTION")
        for line in lines[1:]:
            assert line[column - 2 : column] == "  " and line[column] != " ", line  # every row starts at the column
        words = " ".join(line[column:] for line in lines[1:]).split()
        for path in paths:
            assert " ".join(load_scenario(path).description.split()) in " ".join(words)


def test_report_compares_with_the_last_run_of_the_same_scenario(tmp_path):
    old, other, new = tmp_path / "stall-1", tmp_path / "throughput-1", tmp_path / "stall-2"
    for d, score in (
        (old, score_of(INCIDENT, started="2026-11-24T10:00:00+0000", rate=160.0)),
        (other, score_of({"name": "throughput"}, started="2026-11-24T12:00:00+0000")),
        (new, score_of(INCIDENT)),
    ):
        d.mkdir()
        (d / "score.json").write_text(json.dumps(score))
    name, prev = find_previous(new, json.loads((new / "score.json").read_text()))
    assert name == "stall-1" and prev["publish"]["rate_msg_s"] == 160.0
    assert find_previous(old, json.loads((old / "score.json").read_text())) is None  # nothing earlier
    html = write_report(new, json.loads((new / "score.json").read_text()), SERIES).read_text()
    assert "✔ As expected" in html and "Not as expected" not in html
    assert "What ran" in html and "stall_append" in html and "What was expected" in html
    assert "stall-1" in html and "worse (-60%)" in html


def test_plots_cover_the_whole_run():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [1, 2, 3])
    _run_span(ax, SERIES, score_of(INCIDENT))  # 1 s warm-up + 5 s: data only in the first 3 s
    assert ax.get_xlim()[0] == 0 and ax.get_xlim()[1] >= 6
    plt.close(fig)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def screenshot(html: Path, png: Path) -> None:
    subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1200,900",
            f"--screenshot={png}",
            html.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )


def banner_colours(png: Path) -> set[str]:
    """Which banner background shows in the first screenful: green (as expected) or red (not)."""
    import matplotlib.image as mpimg

    pixels = (mpimg.imread(str(png))[:300, :, :3] * 255).round().astype(int)
    colours = {tuple(p) for p in pixels.reshape(-1, 3)}
    found = set()
    if (0xE6, 0xF4, 0xEA) in colours:
        found.add("green")
    if (0xFD, 0xE7, 0xEA) in colours:
        found.add("red")
    return found


@pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("scenario, failed, colour", [(INCIDENT, 298, "green"), ({"name": "plain"}, 298, "red")])
def test_the_verdict_is_the_first_thing_a_user_sees(tmp_path, scenario, failed, colour):
    html = write_report(tmp_path, score_of(scenario, failed=failed), SERIES)
    png = tmp_path / "report.png"
    screenshot(html, png)
    assert banner_colours(png) == {colour}
