"""RuntimeAdminProcessor: the admin codes about the broker process itself, not its topics or groups.

GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG (26), UPDATE_BROKER_CONFIG (25), VIEW_BROKER_STATS_DATA (315)
and our FAULT_INJECT, registered by broker/request_table.py. Upstream answers these in AdminBrokerProcessor
too; they are apart here because they need none of its managers, only the config, the runtime table,
the stats windows and the fault injector.

Two ``updateBrokerConfig`` keys are not broker.conf keys but run-time switches of ours:
``logLevel`` (DEBUG/INFO/WARNING/ERROR: the root log level) and ``requestLogEnable`` (true: one debug
line per request on logger ``broker.requests``). ``getBrokerConfig`` lists their current values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from broker import logging_setup
from broker.config import BOOT_ONLY_KEYS, ConfigError, build_config
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import FaultInjectRequestHeader, GetBrokerConfigResponseHeader, decode_header, encode_header

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.data_version import DataVersion
    from broker.fault_injection import FaultInjector
    from broker.metrics import StatsWindows

log = structlog.get_logger(__name__)

#: Upstream's ``configBlackList`` default: keys updateBrokerConfig refuses with NO_PERMISSION.
CONFIG_BLACK_LIST = ("configBlackList", "brokerConfigPath")
#: updateBrokerConfig keys that are run-time switches, not broker.conf keys.
LOG_LEVEL_KEY = "logLevel"
REQUEST_LOG_KEY = "requestLogEnable"


@dataclass(kw_only=True, eq=False)
class RuntimeAdminProcessor:
    config: BrokerConfig  # changed in place by update_config, so every holder sees the new values
    config_version: DataVersion
    runtime_table: Callable[[], dict[str, Any]]
    windows: StatsWindows
    fault_injector: FaultInjector
    now_ms: Callable[[], int]

    def get_broker_runtime_info(self, channel, request: RemotingCommand) -> RemotingCommand:
        table = {k: str(v) for k, v in self.runtime_table().items()}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"table": table}))

    # -- config ----------------------------------------------------------------------------
    def get_broker_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        items = dict(self.config.wire_items())
        items[LOG_LEVEL_KEY] = logging_setup.get_level()
        items[REQUEST_LOG_KEY] = str(logging_setup.request_logging_enabled()).lower()
        text = "\n".join(f"{k}={v}" for k, v in sorted(items.items())) + "\n"
        version = orjson.dumps(self.config_version.to_json()).decode()
        return request.response(
            ResponseCode.SUCCESS,
            ext_fields=encode_header(GetBrokerConfigResponseHeader(version=version)),
            body=text.encode(),
        )

    def update_broker_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        if not request.body:
            # Upstream answers SUCCESS for an empty body (nothing to change); say why nothing happened.
            return request.response(ResponseCode.SYSTEM_ERROR, "updateBrokerConfig needs properties in the body")
        items = parse_properties(bytes(request.body).decode("utf-8", "replace"))
        keys = {k for k, _ in items}
        if keys & set(CONFIG_BLACK_LIST):
            return request.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        switches = {k: v for k, v in items if k in (LOG_LEVEL_KEY, REQUEST_LOG_KEY)}
        items = [(k, v) for k, v in items if k not in switches]
        try:
            if LOG_LEVEL_KEY in switches:
                logging_setup.parse_level(switches[LOG_LEVEL_KEY])  # validate before changing anything
            if REQUEST_LOG_KEY in switches and switches[REQUEST_LOG_KEY].lower() not in ("true", "false"):
                raise ValueError(f"{REQUEST_LOG_KEY} must be true or false, got {switches[REQUEST_LOG_KEY]!r}")
            if items:
                self.update_config(items)
        except (ConfigError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if LOG_LEVEL_KEY in switches:
            level = logging_setup.set_level(switches[LOG_LEVEL_KEY])
            log.warning("log level changed", level=level, remote=getattr(channel, "remote_addr", None))
        if REQUEST_LOG_KEY in switches:
            enabled = switches[REQUEST_LOG_KEY].lower() == "true"
            logging_setup.set_request_logging(enabled)
            log.warning("request logging switched", enabled=enabled, remote=getattr(channel, "remote_addr", None))
        return request.response(ResponseCode.SUCCESS)

    def update_config(self, items: list[tuple[str, str]]) -> None:
        """Validate the whole result, then apply the keys that can change live (ConfigError otherwise)."""
        current = list(self.config.wire_items().items())
        new_config, _ = build_config(current + items)
        changed = {k for k, _ in items}
        blocked = sorted(changed & BOOT_ONLY_KEYS)
        if blocked:
            raise ConfigError(
                f"these keys cannot change while the broker runs: {', '.join(blocked)} "
                "(set them in broker.conf or with --set, then restart)"
            )
        for name in vars(new_config):
            setattr(self.config, name, getattr(new_config, name))
        self.config_version.next_version(self.now_ms)
        log.info("broker config updated", keys=sorted(changed))

    # -- stats (mqadmin statsAll) ---------------------------------------------------------
    def view_broker_stats_data(self, channel, request: RemotingCommand) -> RemotingCommand:
        name, key = request.ext_fields.get("statsName"), request.ext_fields.get("statsKey")
        if not name or key is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, "the header fields 'statsName' and 'statsKey' are required"
            )
        data = self.windows.view(name, key)
        if data is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(data, option=orjson.OPT_SORT_KEYS))

    # -- fault injection (ours) ------------------------------------------------------------
    def fault_inject(self, channel, request: RemotingCommand) -> RemotingCommand:
        if not self.config.fault_injection_enable:
            return request.response(
                ResponseCode.NO_PERMISSION,
                "fault injection is disabled; start the broker with faultInjectionEnable=true",
            )
        hdr = decode_header(FaultInjectRequestHeader, request.ext_fields)
        try:
            self.fault_injector.inject(hdr.kind, hdr.target, hdr.duration_ms or 0, hdr.value)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        return request.response(ResponseCode.SUCCESS)


def parse_properties(text: str) -> list[tuple[str, str]]:
    """``key=value`` lines as Java's Properties writes them (``#`` comments, ``:`` also separates)."""
    items = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            items.append((line, ""))
            continue
        items.append((line[:cut].strip(), line[cut + 1 :].strip()))
    return items
