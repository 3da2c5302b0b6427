"""Broker configuration: one typed object built from defaults, then broker.conf, then ``--set``.

Keys are RocketMQ's own ``broker.conf`` property names (BrokerConfig, MessageStoreConfig,
NettyServerConfig beans flattened, as upstream's ``MixAll.properties2Object`` does). The object is
validated once at start-up; an unknown key or a bad value raises :class:`ConfigError` with one clear
line, which ``mqbroker`` prints before exiting with status 2.

Some upstream keys are accepted so that an existing broker.conf loads unchanged, but have no effect
here (HA, DLedger, ACL details...). They are listed in ``INERT_KEYS`` and reported once at boot.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from store.config import MessageStoreConfig

_CPUS = os.cpu_count() or 1


class ConfigError(ValueError):
    """A configuration problem worth exactly one line to the operator."""


def _k(
    wire: str,
    default: Any = dataclasses.MISSING,
    *,
    factory: Any = dataclasses.MISSING,
    choices: tuple[str, ...] | None = None,
    minimum: int | None = None,
    alias: str | None = None,
):
    meta = {"wire": wire, "choices": choices, "minimum": minimum, "alias": alias}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _first_non_loopback_ipv4() -> str:
    """Upstream's default for brokerIP1: the first site-local, non-loopback IPv4 address."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            # connect() on UDP sends nothing; it only asks the kernel which source address it would use.
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
            if not ip.startswith("127."):
                return ip
    except OSError:
        pass
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            ip = info[4][0]
            if not ip.startswith("127."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass
class BrokerConfig:
    """Every key the broker honours, with upstream's defaults (4.9.x)."""

    # -- identity and addresses -------------------------------------------------------------
    broker_cluster_name: str = _k("brokerClusterName", "DefaultCluster")
    broker_name: str = _k("brokerName", factory=socket.gethostname)
    broker_id: int = _k("brokerId", 0, minimum=0)
    broker_ip1: str = _k("brokerIP1", factory=_first_non_loopback_ipv4)
    broker_ip2: str = _k("brokerIP2", "")
    listen_port: int = _k("listenPort", 10911, minimum=0)
    namesrv_addr: str = _k("namesrvAddr", factory=lambda: os.environ.get("NAMESRV_ADDR", ""))
    namesrv_listen_port: int = _k("namesrvListenPort", 9876, minimum=-1)  # ours; -1 = no embedded namesrv
    namesrv_listen_host: str = _k("namesrvListenHost", "0.0.0.0")  # ours
    listen_host: str = _k("listenHost", "0.0.0.0")  # ours
    broker_permission: int = _k("brokerPermission", 6, minimum=0)
    region_id: str = _k("regionId", "DefaultRegion")
    trace_on: bool = _k("traceOn", True)
    register_name_server_period: int = _k("registerNameServerPeriod", 30_000, minimum=1000)
    register_broker_timeout_mills: int = _k("registerBrokerTimeoutMills", 6000, minimum=1)

    # -- topics and groups ---------------------------------------------------------------
    auto_create_topic_enable: bool = _k("autoCreateTopicEnable", True)
    auto_create_subscription_group: bool = _k("autoCreateSubscriptionGroup", True)
    default_topic_queue_nums: int = _k("defaultTopicQueueNums", 8, minimum=1)
    cluster_topic_enable: bool = _k("clusterTopicEnable", True)
    broker_topic_enable: bool = _k("brokerTopicEnable", True)
    trace_topic_enable: bool = _k("traceTopicEnable", False)
    msg_trace_topic_name: str = _k("msgTraceTopicName", "RMQ_SYS_TRACE_TOPIC")
    notify_consumer_ids_changed_enable: bool = _k("notifyConsumerIdsChangedEnable", True)
    enable_property_filter: bool = _k("enablePropertyFilter", False)
    filter_support_retry: bool = _k("filterSupportRetry", False)
    reject_transaction_message: bool = _k("rejectTransactionMessage", False)
    acl_enable: bool = _k("aclEnable", False)
    # ACL files live in <rocketmqHome>/conf (plain_acl.yml, acl/*.yml); empty: $ROCKETMQ_HOME, else storePathRootDir
    rocketmq_home: str = _k("rocketmqHome", factory=lambda: os.environ.get("ROCKETMQ_HOME", ""))

    # -- request executors (processor/executor pairs) -----------------------------------
    send_message_thread_pool_nums: int = _k("sendMessageThreadPoolNums", min(_CPUS, 4), minimum=1)
    pull_message_thread_pool_nums: int = _k("pullMessageThreadPoolNums", 16 + _CPUS * 2, minimum=1)
    process_reply_message_thread_pool_nums: int = _k("processReplyMessageThreadPoolNums", 16 + _CPUS * 2, minimum=1)
    query_message_thread_pool_nums: int = _k("queryMessageThreadPoolNums", 8 + _CPUS, minimum=1)
    admin_broker_thread_pool_nums: int = _k("adminBrokerThreadPoolNums", 16, minimum=1)
    client_manage_thread_pool_nums: int = _k("clientManageThreadPoolNums", 32, minimum=1)
    consumer_manage_thread_pool_nums: int = _k("consumerManageThreadPoolNums", 32, minimum=1)
    heartbeat_thread_pool_nums: int = _k("heartbeatThreadPoolNums", min(32, _CPUS), minimum=1)
    end_transaction_thread_pool_nums: int = _k(
        "endTransactionThreadPoolNums", max(8 + _CPUS * 2, min(_CPUS, 4) * 4), minimum=1
    )
    send_thread_pool_queue_capacity: int = _k("sendThreadPoolQueueCapacity", 10_000, minimum=1)
    pull_thread_pool_queue_capacity: int = _k("pullThreadPoolQueueCapacity", 100_000, minimum=1)
    reply_thread_pool_queue_capacity: int = _k("replyThreadPoolQueueCapacity", 10_000, minimum=1)
    query_thread_pool_queue_capacity: int = _k("queryThreadPoolQueueCapacity", 20_000, minimum=1)
    client_manager_thread_pool_queue_capacity: int = _k("clientManagerThreadPoolQueueCapacity", 1_000_000, minimum=1)
    consumer_manager_thread_pool_queue_capacity: int = _k(
        "consumerManagerThreadPoolQueueCapacity", 1_000_000, minimum=1
    )
    heartbeat_thread_pool_queue_capacity: int = _k("heartbeatThreadPoolQueueCapacity", 50_000, minimum=1)
    end_transaction_pool_queue_capacity: int = _k("endTransactionPoolQueueCapacity", 100_000, minimum=1)
    # Upstream's admin pool is an unbounded fixed pool; ours is bounded so a flood cannot eat memory.
    admin_broker_thread_pool_queue_capacity: int = _k("adminBrokerThreadPoolQueueCapacity", 100_000, minimum=1)

    # -- flow control and fast failure ------------------------------------------------
    broker_fast_failure_enable: bool = _k("brokerFastFailureEnable", True)
    wait_time_mills_in_send_queue: int = _k("waitTimeMillsInSendQueue", 200, minimum=0)
    wait_time_mills_in_pull_queue: int = _k("waitTimeMillsInPullQueue", 5000, minimum=0)
    wait_time_mills_in_heartbeat_queue: int = _k("waitTimeMillsInHeartbeatQueue", 31_000, minimum=0)
    wait_time_mills_in_transaction_queue: int = _k("waitTimeMillsInTransactionQueue", 3000, minimum=0)
    start_accept_send_request_time_stamp: int = _k("startAcceptSendRequestTimeStamp", 0)
    fault_injection_enable: bool = _k("faultInjectionEnable", False)  # ours

    # -- consumers ---------------------------------------------------------------------
    long_polling_enable: bool = _k("longPollingEnable", True)
    short_polling_time_mills: int = _k("shortPollingTimeMills", 1000, minimum=0)
    flush_consumer_offset_interval: int = _k("flushConsumerOffsetInterval", 5000, minimum=100)
    channel_expired_timeout: int = _k("channelExpiredTimeout", 120_000, minimum=1000)  # upstream constant
    rebalance_lock_max_live_time: int = _k("rebalanceLockMaxLiveTime", 60_000, minimum=1)  # upstream -D property
    max_reconsume_times: int = _k("maxReconsumeTimes", 16, minimum=0)  # ours: default retryMaxTimes of new groups
    transaction_timeout: int = _k("transactionTimeOut", 6000, minimum=0)
    transaction_check_max: int = _k("transactionCheckMax", 15, minimum=0)
    transaction_check_interval: int = _k("transactionCheckInterval", 60_000, minimum=10)

    # -- store (MessageStoreConfig) ----------------------------------------------------
    store_path_root_dir: str = _k("storePathRootDir", factory=lambda: str(Path.home() / "store"))
    store_path_commit_log: str = _k("storePathCommitLog", "")
    mapped_file_size_commit_log: int = _k(
        "mappedFileSizeCommitLog", 1024 * 1024 * 1024, minimum=4096, alias="mapedFileSizeCommitLog"
    )
    mapped_file_size_consume_queue: int = _k(
        "mappedFileSizeConsumeQueue", 300_000 * 20, minimum=20 * 16, alias="mapedFileSizeConsumeQueue"
    )
    flush_disk_type: str = _k("flushDiskType", "ASYNC_FLUSH", choices=("ASYNC_FLUSH", "SYNC_FLUSH"))
    broker_role: str = _k("brokerRole", "ASYNC_MASTER", choices=("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"))
    flush_interval_commit_log: int = _k("flushIntervalCommitLog", 500, minimum=1)
    flush_commit_log_least_pages: int = _k("flushCommitLogLeastPages", 4, minimum=0)
    flush_commit_log_thorough_interval: int = _k("flushCommitLogThoroughInterval", 10_000, minimum=1)
    commit_interval_commit_log: int = _k("commitIntervalCommitLog", 200, minimum=1)
    commit_commit_log_least_pages: int = _k("commitCommitLogLeastPages", 4, minimum=0)
    commit_commit_log_thorough_interval: int = _k("commitCommitLogThoroughInterval", 200, minimum=1)
    flush_interval_consume_queue: int = _k("flushIntervalConsumeQueue", 1000, minimum=1)
    sync_flush_timeout: int = _k("syncFlushTimeout", 5000, minimum=1)
    transient_store_pool_enable: bool = _k("transientStorePoolEnable", False)
    transient_store_pool_size: int = _k("transientStorePoolSize", 5, minimum=1)
    fast_fail_if_no_buffer_in_store_pool: bool = _k("fastFailIfNoBufferInStorePool", False)
    os_page_cache_busy_timeout_mills: int = _k("osPageCacheBusyTimeOutMills", 1000, minimum=1)
    max_message_size: int = _k("maxMessageSize", 1024 * 1024 * 4, minimum=1)
    check_crc_on_recover: bool = _k("checkCRCOnRecover", True)
    message_index_enable: bool = _k("messageIndexEnable", True)
    message_index_safe: bool = _k("messageIndexSafe", False)
    max_hash_slot_num: int = _k("maxHashSlotNum", 5_000_000, minimum=1)
    max_index_num: int = _k("maxIndexNum", 20_000_000, minimum=1)
    default_query_max_num: int = _k("defaultQueryMaxNum", 32, minimum=1)
    max_transfer_bytes_on_message_in_memory: int = _k("maxTransferBytesOnMessageInMemory", 256 * 1024, minimum=1)
    max_transfer_count_on_message_in_memory: int = _k("maxTransferCountOnMessageInMemory", 32, minimum=1)
    max_transfer_bytes_on_message_in_disk: int = _k("maxTransferBytesOnMessageInDisk", 64 * 1024, minimum=1)
    max_transfer_count_on_message_in_disk: int = _k("maxTransferCountOnMessageInDisk", 8, minimum=1)
    delete_when: str = _k("deleteWhen", "04")
    file_reserved_time: int = _k("fileReservedTime", 72, minimum=0)
    disk_max_used_space_ratio: int = _k("diskMaxUsedSpaceRatio", 75, minimum=10)
    clean_resource_interval: int = _k("cleanResourceInterval", 10_000, minimum=10)
    clean_file_forcibly_enable: bool = _k("cleanFileForciblyEnable", True)
    warm_mapped_file_enable: bool = _k("warmMapedFileEnable", False)
    message_delay_level: str = _k("messageDelayLevel", DEFAULT_DELAY_LEVELS)
    flush_delay_offset_interval: int = _k("flushDelayOffsetInterval", 10_000, minimum=100)

    # -- operations (ours) -----------------------------------------------------------
    metrics_exporter_type: str = _k("metricsExporterType", "DISABLE", choices=("DISABLE", "PROM"))
    metrics_prom_exporter_host: str = _k("metricsPromExporterHost", "0.0.0.0")
    metrics_prom_exporter_port: int = _k("metricsPromExporterPort", 5557, minimum=0)
    frame_max_length: int = _k("frameMaxLength", 16 * 1024 * 1024, minimum=1024)
    shutdown_grace_mills: int = _k("shutdownGraceMills", 5000, minimum=0)

    # -- the 5.x gRPC endpoint (upstream proxy's keys; -1 disables it) ------------------
    grpc_server_port: int = _k("grpcServerPort", 8081, minimum=-1)
    grpc_listen_host: str = _k("grpcListenHost", "0.0.0.0")  # ours
    grpc_tls_enable: bool = _k("grpcTlsEnable", True)  # ours; false = plaintext
    grpc_tls_cert_path: str = _k("grpcTlsCertPath", "")  # ours; empty = self-signed, generated at boot
    grpc_tls_key_path: str = _k("grpcTlsKeyPath", "")  # ours
    grpc_proxy_long_polling_timeout_mills: int = _k("grpcProxyLongPollingTimeoutMills", 20_000, minimum=0)

    # ------------------------------------------------------------------------------
    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def namesrv_addr_list(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def delay_levels_ms(self) -> list[int]:
        """``messageDelayLevel`` parsed into milliseconds per level (level 1 = index 0)."""
        return parse_delay_levels(self.message_delay_level)

    def to_store_config(self) -> MessageStoreConfig:
        """The store's view of this configuration; the store never parses broker.conf itself."""
        store_fields = {f.name for f in fields(MessageStoreConfig)}
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name in store_fields}
        if "store_path_commit_log" in store_fields:
            values["store_path_commit_log"] = self.store_path_commit_log or None
        return MessageStoreConfig(**values)

    def wire_items(self) -> dict[str, str]:
        """All keys with their values as strings, as GET_BROKER_CONFIG answers them."""
        return {f.metadata["wire"]: _format_value(getattr(self, f.name)) for f in fields(self)}


# Upstream keys that load without error but do nothing here (listed so an existing broker.conf works).
INERT_KEYS = frozenset(
    {
        "haListenPort",
        "haSendHeartbeatInterval",
        "haHousekeepingInterval",
        "haTransferBatchSize",
        "haMasterAddress",
        "haSlaveFallbehindMax",
        "enableDLegerCommitLog",
        "dLegerGroup",
        "dLegerPeers",
        "dLegerSelfId",
        "slaveReadEnable",
        "serverWorkerThreads",
        "serverCallbackExecutorThreads",
        "serverSelectorThreads",
        "serverOnewaySemaphoreValue",
        "serverAsyncSemaphoreValue",
        "serverChannelMaxIdleTimeSeconds",
        "serverSocketSndBufSize",
        "serverSocketRcvBufSize",
        "serverPooledByteBufAllocatorEnable",
        "useEpollNativeSelector",
        "fetchNamesrvAddrByAddressServer",
        "transferMsgByHeap",
        "highSpeedMode",
        "compressedRegister",
        "forceRegister",
        "useReentrantLockWhenPutMessage",
        "flushCommitLogTimed",
        "deleteCommitLogFilesInterval",
        "deleteConsumeQueueFilesInterval",
        "destroyMapedFileIntervalForcibly",
        "redeleteHangedFileInterval",
        "putMsgIndexHightWater",
        "accessMessageInMemoryMaxRatio",
        "flushConsumeQueueLeastPages",
        "flushConsumeQueueThoroughInterval",
        "maxMsgsNumBatch",
        "offsetCheckInSlave",
        "debugLockEnable",
        "duplicationEnable",
        "diskFallRecorded",
        "enableConsumeQueueExt",
        "mappedFileSizeConsumeQueueExt",
        "bitMapLengthConsumeQueueExt",
        "enableCalcFilterBitMap",
        "expectConsumerNumUseFilter",
        "maxErrorRateOfBloomFilter",
        "filterDataCleanTimeSpan",
        "filterServerNums",
        "commercialEnable",
        "commercialTimerCount",
        "commercialTransCount",
        "commercialBigCount",
        "commercialBaseCount",
        "maxDelayTime",
        "disableConsumeIfConsumerReadSlowly",
        "consumerFallbehindThreshold",
        "storeReplyMessageEnable",
        "autoDeleteUnusedStats",
        "isEnableBatchPush",
        "enableDetailStat",
        "messageStorePlugIn",
        "flushConsumerOffsetHistoryInterval",
        "aclEnable_",
        "storePathIndex",
        "storeCheckpoint",
        "abortFile",
    }
)


def parse_delay_levels(text: str) -> list[int]:
    """Parse ``messageDelayLevel`` ("1s 5s ... 2h"; units s, m, h, d) into milliseconds."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    levels: list[int] = []
    for token in text.split():
        unit = token[-1:]
        if unit not in units or not token[:-1].isdigit():
            raise ConfigError(f"messageDelayLevel: bad level {token!r} (expected a number followed by s, m, h or d)")
        levels.append(int(token[:-1]) * units[unit])
    if not levels:
        raise ConfigError("messageDelayLevel: at least one level is required")
    return levels


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _field_table() -> dict[str, dataclasses.Field]:
    table: dict[str, dataclasses.Field] = {}
    for f in fields(BrokerConfig):
        table[f.metadata["wire"]] = f
        if f.metadata.get("alias"):
            table[f.metadata["alias"]] = f
    return table


JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1
# Upstream declares these as long; every other number is a Java int.
_LONG_KEYS = frozenset(
    {
        "brokerId",
        "startAcceptSendRequestTimeStamp",
        "waitTimeMillsInSendQueue",
        "waitTimeMillsInPullQueue",
        "waitTimeMillsInHeartbeatQueue",
        "waitTimeMillsInTransactionQueue",
        "shortPollingTimeMills",
        "channelExpiredTimeout",
        "rebalanceLockMaxLiveTime",
        "transactionTimeOut",
        "transactionCheckInterval",
        "syncFlushTimeout",
        "osPageCacheBusyTimeOutMills",
        "flushDelayOffsetInterval",
    }
)
# Ranges tighter than the Java type (a port is 0-65535; permissions are the PermName bits).
_MAXIMA = {
    "listenPort": 65535,
    "namesrvListenPort": 65535,
    "metricsPromExporterPort": 65535,
    "grpcServerPort": 65535,
    "brokerPermission": 15,
    "diskMaxUsedSpaceRatio": 95,
}
# Read once at start (servers, executors, files, fault injection): UPDATE_BROKER_CONFIG refuses them.
BOOT_ONLY_KEYS = frozenset(
    {
        "listenPort",
        "namesrvListenPort",
        "listenHost",
        "namesrvListenHost",
        "storePathRootDir",
        "storePathCommitLog",
        "brokerName",
        "brokerClusterName",
        "brokerIP1",
        "mappedFileSizeCommitLog",
        "mappedFileSizeConsumeQueue",
        "transientStorePoolEnable",
        "transientStorePoolSize",
        "maxHashSlotNum",
        "maxIndexNum",
        "frameMaxLength",
        "metricsExporterType",
        "metricsPromExporterHost",
        "metricsPromExporterPort",
        "faultInjectionEnable",
        "sendMessageThreadPoolNums",
        "pullMessageThreadPoolNums",
        "processReplyMessageThreadPoolNums",
        "queryMessageThreadPoolNums",
        "adminBrokerThreadPoolNums",
        "clientManageThreadPoolNums",
        "consumerManageThreadPoolNums",
        "heartbeatThreadPoolNums",
        "endTransactionThreadPoolNums",
        "aclEnable",
        "rocketmqHome",  # ACL: the hook and its files are set up at boot
        "grpcServerPort",
        "grpcListenHost",
        "grpcTlsEnable",
        "grpcTlsCertPath",
        "grpcTlsKeyPath",  # the 5.x endpoint
    }
)


def _convert(f: dataclasses.Field, key: str, raw: str) -> Any:
    raw = raw.strip()
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if kind == "bool":
        lowered = raw.lower()
        if lowered not in ("true", "false"):
            raise ConfigError(f"{key}: expected true or false, got {raw!r}")
        return lowered == "true"
    if kind == "int":
        try:
            value = int(raw, 10)
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {raw!r}") from None
        minimum = f.metadata.get("minimum")
        if minimum is not None and value < minimum:
            raise ConfigError(f"{key}: must be at least {minimum}, got {value}")
        wire = f.metadata["wire"]
        maximum = _MAXIMA.get(wire, JAVA_LONG_MAX if wire in _LONG_KEYS else JAVA_INT_MAX)
        if value > maximum:
            raise ConfigError(f"{key}: must be at most {maximum}, got {value}")
        if value < -JAVA_LONG_MAX - 1 or (wire not in _LONG_KEYS and value < -JAVA_INT_MAX - 1):
            raise ConfigError(f"{key}: out of range, got {value}")
        return value
    choices = f.metadata.get("choices")
    if choices and raw not in choices:
        raise ConfigError(f"{key}: must be one of {', '.join(choices)}, got {raw!r}")
    return raw


def read_properties(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Read a Java-properties broker.conf: ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    items: list[tuple[str, str]] = []
    pending = ""
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = (pending + line.strip()) if pending else line.strip()
        pending = ""
        if not stripped or stripped[0] in "#!":
            continue
        if stripped.endswith("\\"):
            pending = stripped[:-1]
            continue
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {line.strip()!r}")
        items.append((stripped[:sep].strip(), stripped[sep + 1 :].strip()))
    return items


def parse_assignments(assignments: Iterable[str]) -> list[tuple[str, str]]:
    """Parse ``--set KEY=VALUE`` arguments."""
    items = []
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        items.append((key.strip(), value))
    return items


def build_config(items: Iterable[tuple[str, str]]) -> tuple[BrokerConfig, list[str]]:
    """Apply (key, value) pairs over the defaults; return the config and the inert keys that were set."""
    table = _field_table()
    values: dict[str, Any] = {}
    inert: list[str] = []
    for key, raw in items:
        f = table.get(key)
        if f is None:
            if key in INERT_KEYS:
                inert.append(key)
                continue
            raise ConfigError(f"unknown configuration key {key!r}")
        values[f.name] = _convert(f, key, raw)
    config = BrokerConfig(**values)
    validate(config)
    return config, inert


def validate(config: BrokerConfig) -> None:
    """Cross-field rules, each reported as one clear line."""
    parse_delay_levels(config.message_delay_level)
    if config.transient_store_pool_enable and (
        config.flush_disk_type != "ASYNC_FLUSH" or config.broker_role == "SLAVE"
    ):
        raise ConfigError(
            "transientStorePoolEnable=true requires flushDiskType=ASYNC_FLUSH on a master "
            "(as upstream); set transientStorePoolEnable=false or flushDiskType=ASYNC_FLUSH"
        )
    if not config.broker_name:
        raise ConfigError("brokerName must not be empty")
    if len(config.delete_when.split(";")) == 0 or not all(
        p.isdigit() and 0 <= int(p) <= 23 for p in config.delete_when.split(";")
    ):
        raise ConfigError(f"deleteWhen: expected hours 00-23 separated by ';', got {config.delete_when!r}")
    if config.listen_port and config.listen_port == config.namesrv_listen_port:
        raise ConfigError("listenPort and namesrvListenPort must differ")
    if config.disk_max_used_space_ratio > 95:
        raise ConfigError("diskMaxUsedSpaceRatio: must be at most 95")


def load_config(
    conf_file: str | None, assignments: Iterable[str] = (), env: Mapping[str, str] | None = None
) -> tuple[BrokerConfig, list[str]]:
    """Defaults, then broker.conf, then ``--set`` (later wins)."""
    items: list[tuple[str, str]] = []
    if conf_file:
        items.extend(read_properties(conf_file))
    items.extend(parse_assignments(assignments))
    return build_config(items)
