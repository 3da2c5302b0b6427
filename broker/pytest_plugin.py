"""The pytest plugin's old address, kept for installs made before it moved to ``broker.testing.pytest_plugin``.

An install writes its ``pytest11`` entry point (``mini_rocketmq = "broker.pytest_plugin"``) into its metadata;
until it is reinstalled, pytest imports this module at start-up, and without it every pytest run of that
environment would fail before collecting a test. New installs point at ``broker.testing.pytest_plugin``.
"""

from broker.testing.pytest_plugin import (  # noqa: F401 - hooks and fixtures, found by pytest by name
    pytest_addoption,
    pytest_configure,
    pytest_runtest_setup,
    rocketmq_broker,
    rocketmq_broker_factory,
)
