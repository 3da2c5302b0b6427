"""Fixtures for the metrics tests: the plugin's in-process brokers and a scraper."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # The pytest11 entry point loads the plugin once the project is installed; a plain checkout loads it here.
    if not config.pluginmanager.has_plugin("mini_rocketmq"):
        import broker.testing.pytest_plugin as plugin

        if not config.pluginmanager.is_registered(plugin):
            config.pluginmanager.register(plugin, "mini_rocketmq")


@pytest.fixture
def prom_broker(rocketmq_broker_factory) -> Callable:
    """``make(**keys)``: a broker exporting Prometheus metrics on a free loopback port."""

    def make(**keys):
        return rocketmq_broker_factory(metricsExporterType="PROM", **keys)

    return make
