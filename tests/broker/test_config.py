"""broker.conf parsing: defaults, files, --set precedence, unknown keys and bad values."""

from __future__ import annotations

import subprocess
import sys

import pytest

from broker.config import ConfigError, build_config, load_config, parse_delay_levels, read_properties


def test_defaults_match_upstream():
    cfg, _ = build_config([])
    assert cfg.listen_port == 10911
    assert cfg.namesrv_listen_port == 9876
    assert cfg.broker_cluster_name == "DefaultCluster"
    assert cfg.default_topic_queue_nums == 8
    assert cfg.max_message_size == 4 * 1024 * 1024
    assert cfg.wait_time_mills_in_send_queue == 200
    assert cfg.wait_time_mills_in_pull_queue == 5000
    assert cfg.wait_time_mills_in_heartbeat_queue == 31000
    assert cfg.wait_time_mills_in_transaction_queue == 3000
    assert cfg.send_thread_pool_queue_capacity == 10000
    assert cfg.pull_thread_pool_queue_capacity == 100000
    assert cfg.broker_fast_failure_enable is True
    assert cfg.os_page_cache_busy_timeout_mills == 1000
    assert cfg.flush_disk_type == "ASYNC_FLUSH"
    assert cfg.delay_levels_ms[:3] == [1000, 5000, 10000] and cfg.delay_levels_ms[-1] == 7_200_000


def test_file_then_set_precedence(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# comment\nbrokerName = broker-x\nlistenPort=20911\n! other comment\nmapedFileSizeCommitLog: 65536\n"
    )
    cfg, _ = load_config(str(conf), ["listenPort=30911", "autoCreateTopicEnable=FALSE"])
    assert cfg.broker_name == "broker-x"
    assert cfg.listen_port == 30911
    assert cfg.mapped_file_size_commit_log == 65536  # the pre-4.4 spelling is accepted
    assert cfg.auto_create_topic_enable is False


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("noSuchKey=1", "unknown configuration key 'noSuchKey'"),
        ("listenPort=abc", "listenPort: expected an integer"),
        ("autoCreateTopicEnable=yes", "autoCreateTopicEnable: expected true or false"),
        ("flushDiskType=SOMETIMES", "flushDiskType: must be one of ASYNC_FLUSH, SYNC_FLUSH"),
        ("sendThreadPoolQueueCapacity=0", "sendThreadPoolQueueCapacity: must be at least 1"),
        ("messageDelayLevel=1s 5x", "messageDelayLevel: bad level '5x'"),
        ("deleteWhen=25", "deleteWhen"),
        ("listenPort", "--set expects KEY=VALUE"),
    ],
)
def test_bad_values_are_one_clear_error(assignment, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [assignment])
    assert message in str(info.value)


def test_transient_pool_needs_async_flush():
    with pytest.raises(ConfigError, match="transientStorePoolEnable=true requires flushDiskType=ASYNC_FLUSH"):
        build_config([("transientStorePoolEnable", "true"), ("flushDiskType", "SYNC_FLUSH")])


def test_inert_upstream_keys_load(tmp_path):
    cfg, inert = build_config([("haListenPort", "10912"), ("serverWorkerThreads", "8")])
    assert sorted(inert) == ["haListenPort", "serverWorkerThreads"]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        read_properties(tmp_path / "nope.conf")


def test_store_config_follows_broker_config(tmp_path):
    cfg, _ = build_config(
        [
            ("storePathRootDir", str(tmp_path)),
            ("mappedFileSizeCommitLog", "1048576"),
            ("osPageCacheBusyTimeOutMills", "321"),
            ("flushDiskType", "SYNC_FLUSH"),
        ]
    )
    store_cfg = cfg.to_store_config()
    assert store_cfg.store_path_root_dir == str(tmp_path)
    assert store_cfg.store_path_commit_log == str(tmp_path / "commitlog")
    assert store_cfg.mapped_file_size_commit_log == 1048576
    assert store_cfg.os_page_cache_busy_timeout_mills == 321
    assert store_cfg.flush_disk_type.value == "SYNC_FLUSH"


def test_delay_levels_units():
    assert parse_delay_levels("1s 2m 3h 1d") == [1000, 120_000, 10_800_000, 86_400_000]


@pytest.mark.parametrize("args", [["--set", "bogus=1"], ["--set", "listenPort=-5"], ["-c", "/nonexistent.conf"]])
def test_mqbroker_exits_2_with_one_line(args):
    proc = subprocess.run([sys.executable, "-m", "broker.main", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("mqbroker: configuration error:")
