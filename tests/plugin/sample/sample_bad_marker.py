"""A marker that cannot apply: the broker of a wider scope is already running."""

import pytest


@pytest.mark.rocketmq_broker_config(autoCreateTopicEnable=False)
def test_marker_needs_function_scope(rocketmq_broker):
    pass
