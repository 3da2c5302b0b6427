"""Issue 13 item 6 and the boot-only keys: numbers get ranges (one clear line, exit 2), and fault injection (with
the other keys read once at start) cannot be switched on by UPDATE_BROKER_CONFIG."""

from __future__ import annotations

import subprocess
import sys

import pytest

from broker.config import ConfigError, build_config
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("listenPort", "99999", "listenPort: must be at most 65535, got 99999"),
        ("namesrvListenPort", "65536", "namesrvListenPort: must be at most 65535"),
        ("metricsPromExporterPort", "70000", "metricsPromExporterPort: must be at most 65535"),
        ("grpcServerPort", "65536", "grpcServerPort: must be at most 65535"),
        ("maxMessageSize", "9999999999", "maxMessageSize: must be at most 2147483647"),
        ("brokerPermission", "16", "brokerPermission: must be at most 15"),
        ("sendThreadPoolQueueCapacity", str(2**31), "must be at most 2147483647"),
    ],
)
def test_numbers_out_of_range_are_one_clear_error(key, value, message):
    with pytest.raises(ConfigError, match=message):
        build_config([(key, value)])


def test_long_keys_take_long_values():
    config, _ = build_config([("startAcceptSendRequestTimeStamp", str(2**40)), ("listenPort", "65535")])
    assert config.start_accept_send_request_time_stamp == 2**40 and config.listen_port == 65535


def test_mqbroker_with_a_port_out_of_range_exits_2_with_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "broker.main", "--set", "listenPort=99999"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "mqbroker: configuration error: listenPort: must be at most 65535, got 99999"
    ]


@pytest.mark.parametrize(
    "body",
    [
        b"faultInjectionEnable=true",
        b"brokerFastFailureEnable=false\nfaultInjectionEnable=true",
        b"sendMessageThreadPoolNums=64",
    ],
)
async def test_boot_only_keys_are_refused_at_run_time(broker, client, body):
    resp = await client.invoke(
        broker.config.broker_addr, RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, {}, body), 5
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "cannot change while the broker runs" in resp.remark and "restart" in resp.remark
    assert broker.config.fault_injection_enable is False and broker.config.broker_fast_failure_enable is True
