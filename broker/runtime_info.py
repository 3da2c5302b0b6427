"""BrokerRuntimeInfo: the table GET_BROKER_RUNTIME_INFO answers (upstream ``prepareRuntimeInfo``).

``mqadmin clusterList`` / ``brokerStatus`` and our own flow tests read it: version and uptime, today's
and yesterday's put/get totals, each request queue's size, capacity, peak, rejections and head wait
(under upstream's queue names), the busy counters of fast failure, the schedule/timer/transaction
services' figures and the store's. It only reads the parts it is given; it owns nothing but the boot time.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.metrics import earliest_message_time

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.long_polling import PullRequestHoldService
    from broker.metrics import StatsWindows
    from broker.schedule import ScheduleMessageService
    from broker.stats import BrokerStats
    from broker.timer import TimerMessageService
    from broker.transaction.check import TransactionalMessageCheckService
    from remoting.executor import RequestExecutor
    from store.message_store import MessageStore

BROKER_VERSION_DESC = "V4_9_8"
BROKER_VERSION = 409

#: Our queue names -> upstream's runtime-info key prefixes.
UPSTREAM_QUEUE_NAMES = {
    "send": "sendThreadPoolQueue",
    "pull": "pullThreadPoolQueue",
    "query": "queryThreadPoolQueue",
    "heartbeat": "heartbeatThreadPoolQueue",
    "end_transaction": "endTransactionThreadPoolQueue",
    "client_manage": "clientManagerThreadPoolQueue",
    "consumer_manage": "consumerManagerThreadPoolQueue",
    "admin": "adminBrokerThreadPoolQueue",
}


@dataclass(kw_only=True, eq=False)
class BrokerRuntimeInfo:
    config: BrokerConfig  # live: updateBrokerConfig changes it in place
    store: MessageStore
    stats: BrokerStats
    windows: StatsWindows
    executors: Mapping[str, RequestExecutor]
    pull_hold_service: PullRequestHoldService
    schedule_service: ScheduleMessageService
    timer_service: TimerMessageService
    transaction_check_service: TransactionalMessageCheckService
    now_ms: Callable[[], int]
    boot_ms: int = field(default=0, init=False)

    def mark_boot(self) -> None:
        self.boot_ms = self.now_ms()

    def table(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerVersion": BROKER_VERSION,
            "bootTimestamp": self.boot_ms,
            "runtime": runtime_text(self.now_ms() - self.boot_ms),
            "msgPutTotalTodayNow": self.stats.total_put,
            "msgGetTotalTodayNow": self.stats.total_get,
            "msgPutTotalYesterdayMorning": self.windows.put_total_yesterday_morning,
            "msgPutTotalTodayMorning": self.windows.put_total_today_morning,
            "msgGetTotalYesterdayMorning": self.windows.get_total_yesterday_morning,
            "msgGetTotalTodayMorning": self.windows.get_total_today_morning,
            "startAcceptSendRequestTimeStamp": self.config.start_accept_send_request_time_stamp,
            "pullRequestHoldCount": self.pull_hold_service.parked_count,
            "scheduleMessageDelivered": self.schedule_service.delivered,
        }
        for name, executor in self.executors.items():
            upstream = UPSTREAM_QUEUE_NAMES.get(name, name + "ThreadPoolQueue")
            info[upstream + "Size"] = executor.size
            info[upstream + "Capacity"] = executor.capacity
            info[upstream + "Peak"] = executor.peak
            info[upstream + "Rejected"] = executor.rejected
            info[upstream + "Expired"] = executor.expired
            info[upstream + "HeadWaitTimeMills"] = executor.head_wait_ms()
        end_tx = self.executors.get("end_transaction")
        if end_tx is not None:  # upstream spells the end-transaction pair unlike every other queue
            info["EndTransactionQueueSize"] = end_tx.size
            info["EndTransactionThreadPoolQueueCapacity"] = end_tx.capacity
        self.stats.observe_overload(self.executors)  # [OVERLOAD] is counted by the executors themselves
        for kind, count in self.stats.busy.items():
            info[f"busy{kind}"] = count
        info.update(self.schedule_service.runtime_info())
        info.update(self.timer_service.runtime_info())
        checks = self.transaction_check_service.total
        info["transactionCheckedTotal"] = checks.checked
        info["transactionDiscardedTotal"] = checks.discarded
        for key, value in self.store.runtime_info().items():
            info.setdefault(key, value)
        info["earliestMessageTimeStamp"] = earliest_message_time(self.store) or -1  # upstream: -1 for an empty store
        root = self.config.store_path_root_dir
        if os.path.isdir(root):
            usage = shutil.disk_usage(root)
            info["commitLogDirCapacity"] = (
                f"Total : {human_readable_bytes(usage.total)}, Free : {human_readable_bytes(usage.free)}."
            )
        return info


def runtime_text(ms: int) -> str:
    """Upstream's uptime text: ``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``."""
    seconds = max(ms, 0) // 1000
    return (
        f"[ {seconds // 86400} days, {seconds % 86400 // 3600} hours, {seconds % 3600 // 60} minutes, "
        f"{seconds % 60} seconds ]"
    )


def human_readable_bytes(n: int) -> str:
    """Upstream's MixAll.humanReadableByteCount(n, false): ``"512 B"``, ``"1.5 GiB"``."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"
