"""Fixtures for the metrics tests: the plugin's in-process brokers and a scraper."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families


def pytest_configure(config: pytest.Config) -> None:
    # The pytest11 entry point loads the plugin once the project is installed; a plain checkout loads it here.
    if not config.pluginmanager.has_plugin("mini_rocketmq"):
        import broker.pytest_plugin as plugin

        if not config.pluginmanager.is_registered(plugin):
            config.pluginmanager.register(plugin, "mini_rocketmq")


class Scrape:
    """One scrape, parsed with prometheus_client's own parser."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}

    def samples(self, name: str, **labels: str) -> list:
        return [s for f in self.families.values() for s in f.samples
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float:
        found = self.samples(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {found}"
        return found[0].value


def scrape(url: str, *, accept: str | None = None) -> Scrape:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200
        return Scrape(resp.read().decode())


@pytest.fixture
def prom_broker(rocketmq_broker_factory) -> Callable:
    """``make(**keys)``: a broker exporting Prometheus metrics on a free loopback port."""
    def make(**keys):
        return rocketmq_broker_factory(metricsExporterType="PROM", **keys)
    return make
