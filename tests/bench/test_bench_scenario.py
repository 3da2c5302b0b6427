"""Scenario files: every bundled one loads; bad ones fail with every problem named."""

from __future__ import annotations

import pytest

from bench.cli import main
from bench.scenario import ScenarioError, bundled_scenarios, load_scenario, parse_scenario


@pytest.mark.parametrize("path", bundled_scenarios(), ids=lambda p: p.stem)
def test_bundled_scenarios_are_valid(path):
    scen = load_scenario(path)
    assert scen.name == path.stem
    # the load workers rebuild the scenario from its dict form: it must survive the trip
    data = scen.to_dict()
    data.pop("source")
    assert parse_scenario(data, scen.source) == scen


def test_seed_incidents_are_bundled():
    names = {p.stem for p in bundled_scenarios()}
    assert {
        "incident-send-queue-overload",
        "incident-pagecache-stall",
        "incident-stall-retry-duplicates",
        "incident-stall-single-attempt",
        "incident-large-messages-slow-consumer",
    } <= names
    dup = load_scenario("incident-stall-retry-duplicates")
    single = load_scenario("incident-stall-single-attempt")
    assert (dup.client.send_timeout_ms, dup.client.attempt_timeout_ms, dup.client.retries) == (4000, 3000, 2)
    assert (single.client.send_timeout_ms, single.client.retries) == (3000, 0)


def test_defaults_aliases_and_unlimited_rate():
    scen = parse_scenario(
        {
            "name": "x",
            "partitionsPerTopic": 16,
            "messageSize": 100,
            "producerRate": 0,
            "testDurationMinutes": 1,
            "consumerPerSubscription": 3,
        }
    )
    assert (scen.queues_per_topic, scen.message_size, scen.producer_rate, scen.duration_s) == (16, 100, None, 60)
    assert scen.consumers == 3 and scen.rate_per_producer is None
    assert parse_scenario({"name": "y", "producer_rate": "unlimited"}).producer_rate is None
    assert parse_scenario({"name": "z", "producer_rate": 100, "producers_per_topic": 4}).rate_per_producer == 25


def test_every_problem_reported_with_hints():
    with pytest.raises(ScenarioError) as ei:
        parse_scenario(
            {
                "name": "bad",
                "mesage_size": 10,
                "topics": 0,
                "send_mode": "sinc",
                "duration_s": "long",
                "client": {"retries": -1, "send_timeout": 5},
                "faults": [{"at_s": 1, "kind": "stall_apend"}, {"kind": "stall_append"}],
                "message_faults": [{"property": "brokerSleepMs", "value": 10}],
            },
            "bad.yaml",
        )
    text = str(ei.value)
    assert text.startswith("bad scenario bad.yaml:")
    for fragment in (
        "unknown field 'mesage_size' (did you mean 'message_size'?)",
        "topics must be > 0",
        "send_mode must be one of sync, async, oneway, batch, got 'sinc' (did you mean 'sync'?)",
        "duration_s must be a number, got 'long'",
        "client.retries must be >= 0",
        "client: unknown field 'send_timeout' (did you mean 'send_timeout_ms'?)",
        "faults[0].kind must be one of",
        "(did you mean 'stall_append'?)",
        "faults[1]: missing required field 'at_s'",
        "message_faults[0]: give 'every'",
    ):
        assert fragment in text, fragment


def test_file_level_errors(tmp_path):
    with pytest.raises(ScenarioError, match="no such file .*bundled scenarios: .*smoke"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="must hold a mapping"):
        load_scenario(listy)


def test_cli_bad_scenario_exit_code(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nqueues_per_topic: -3\n")
    assert main(["run", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "queues_per_topic must be >= 0" in err or "queues_per_topic must be > 0" in err
    assert main(["validate", str(bad)]) == 2
    assert main(["validate", "smoke"]) == 0
    assert main(["run", "smoke", "--conf", "no-equals-sign", "--out", str(tmp_path / "o")]) == 2
    assert "--conf wants KEY=VALUE" in capsys.readouterr().err
