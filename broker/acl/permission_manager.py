"""The ACL files and the tables built from them (J ``PlainPermissionManager``): load, check, change, reload.

Files: ``<home>/conf/plain_acl.yml`` (created empty when missing, as upstream does) plus every ``*.yml`` /
``*.yaml`` under ``<home>/conf/acl``. An access key defined in two files counts only in the first (the
``conf/acl`` files in name order, then ``plain_acl.yml``), with one warning line. The tables are rebuilt as a
whole and swapped in one assignment, so a request never sees half a reload; a file that does not parse keeps
the previous tables and logs one warning (at boot it is an error: :class:`AclError`).

Upstream reloads one changed file at a time with a few quirks; we reload all of them when any changes, which
gives the same tables for every well-formed set of files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from broker.acl.account import (
    ACCOUNT_KEYS,
    MIN_KEY_LENGTH,
    PlainAccount,
    account_config_json,
    check_keys,
    is_retry_topic,
    printable_resource,
)
from broker.acl.errors import (
    FRAME_CHECK_ADMIN,
    FRAME_CHECK_DEFAULT,
    FRAME_CHECK_RESOURCE,
    FRAME_VALIDATE_NO_ACCESS_KEY,
    FRAME_VALIDATE_SIGNATURE,
    FRAME_VALIDATE_UNKNOWN_KEY,
    AclError,
)
from broker.acl.permission import PUB, check_permission, check_resource_perms, need_admin
from broker.acl.remote_address import AddressStrategy, address_strategy
from broker.data_version import DataVersion
from remoting.signature import signature_matches

log = structlog.get_logger(__name__)

DEFAULT_ACL_FILE = os.path.join("conf", "plain_acl.yml")
ACL_DIR = os.path.join("conf", "acl")
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


@dataclass(slots=True)
class AccessRequest:
    """What one request asks for (J ``PlainAccessResource`` filled by ``PlainAccessValidator.parse``)."""

    code: int
    remote_host: str | None
    access_key: str | None = None
    signature: str | None = None
    security_token: str | None = None
    #: resource → permission needed; insertion order is the order the checks run
    resources: dict[str, int] = field(default_factory=dict)
    #: secret key → the signature this request should carry; computed only when a signature is checked
    signature_for: Callable[[str], str] | None = None

    def need(self, resource: str | None, perm: int) -> None:
        if resource is not None:
            self.resources[resource] = perm


@dataclass(frozen=True, slots=True)
class AclTables:
    files: tuple[str, ...] = ()
    accounts: Mapping[str, PlainAccount] = field(default_factory=dict)
    account_file: Mapping[str, str] = field(default_factory=dict)
    global_white: tuple[AddressStrategy, ...] = ()
    data_versions: Mapping[str, DataVersion] = field(default_factory=dict)


def read_yaml(path: str) -> Any:
    # yaml is imported by the first ACL file read or written, not by every broker's start (issue 15: it is
    # ~15% of the import time of a broker with ACL off, the default)
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except FileNotFoundError:
        return None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise AclError(f"{path} is not valid YAML: {str(exc).splitlines()[0] if str(exc) else exc}") from None


def write_yaml(path: str, data: Mapping[str, Any]) -> None:
    """Write atomically (a reader or the watcher never sees half a file)."""
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(dict(data), Dumper=dumper, default_flow_style=False, sort_keys=False, allow_unicode=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


class PlainPermissionManager:
    def __init__(self, home: str, *, now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self.home = os.path.abspath(home)
        self.default_file = os.path.join(self.home, DEFAULT_ACL_FILE)
        self.acl_dir = os.path.join(self.home, ACL_DIR)
        self.now_ms = now_ms
        self.tables = AclTables()
        self.default_version = DataVersion(timestamp=now_ms())
        self._stamps: dict[str, tuple[int, int, int]] = {}

    # ---- loading ---------------------------------------------------------------------------------
    def acl_files(self) -> list[str]:
        found: list[str] = []
        if os.path.isdir(self.acl_dir):
            for root, dirs, files in os.walk(self.acl_dir):
                dirs.sort()
                found.extend(os.path.join(root, f) for f in sorted(files) if f.endswith((".yml", ".yaml")))
        if os.path.isfile(self.default_file) and self.default_file not in found:
            found.append(self.default_file)
        return found

    def load(self) -> None:
        """(Re)build every table from the files; raises :class:`AclError` and keeps the old tables on error."""
        if not os.path.exists(self.default_file):  # upstream creates it too (never touch an existing one)
            Path(self.default_file).parent.mkdir(parents=True, exist_ok=True)
            Path(self.default_file).touch()
        files = self.acl_files()
        accounts: dict[str, PlainAccount] = {}
        account_file: dict[str, str] = {}
        white: list[AddressStrategy] = []
        versions: dict[str, DataVersion] = {}
        for path in files:
            data = read_yaml(path)
            if not data:
                log.info("acl file has no data", file=path)
                continue
            if not isinstance(data, Mapping):
                raise AclError(f"{path} must hold a mapping (globalWhiteRemoteAddresses, accounts)")
            for pattern in _items(data.get("globalWhiteRemoteAddresses"), path):
                white.append(address_strategy(None if pattern is None else str(pattern)))
            for entry in _items(data.get("accounts"), path):
                account = PlainAccount.from_config(entry)
                if account.access_key in account_file:
                    log.warning(
                        "access key defined in more than one acl file, the first one counts",
                        access_key=account.access_key,
                        file=path,
                        first=account_file[account.access_key],
                    )
                    continue
                accounts[account.access_key] = account
                account_file[account.access_key] = path
            versions[path] = _data_version(data.get("dataVersion"), self.now_ms)
        self.tables = AclTables(
            files=tuple(files),
            accounts=accounts,
            account_file=account_file,
            global_white=tuple(white),
            data_versions=versions,
        )
        if self.default_file in versions:
            self.default_version = versions[self.default_file]
        self._stamps = self._file_stamps()
        log.info("acl loaded", files=len(files), accounts=len(accounts), global_white=len(white))

    def _file_stamps(self) -> dict[str, tuple[int, int, int]]:
        stamps = {}
        for path in self.acl_files():
            try:
                st = os.stat(path)
            except OSError:
                continue
            stamps[path] = (st.st_mtime_ns, st.st_size, st.st_ino)
        return stamps

    def reload_if_changed(self) -> bool:
        """The watcher's tick: reload when a file was added, removed or changed. Never raises."""
        if self._file_stamps() == self._stamps:
            return False
        try:
            self.load()
        except (AclError, OSError) as exc:
            self._stamps = self._file_stamps()  # do not retry (and log) every tick until the file changes again
            log.warning("acl files changed but cannot be loaded, keeping the previous rules", error=str(exc))
            return False
        return True

    # ---- checking --------------------------------------------------------------------------------
    def validate(self, request: AccessRequest) -> None:
        """Raise :class:`AclError` unless the request may go on (J ``PlainPermissionManager.validate``)."""
        tables = self.tables
        host = request.remote_host
        for strategy in tables.global_white:
            if strategy.match(host):
                return
        if request.access_key is None:
            raise AclError("No accessKey is configured", FRAME_VALIDATE_NO_ACCESS_KEY)
        account = tables.accounts.get(request.access_key)
        if account is None:
            raise AclError(f"No acl config for {request.access_key}", FRAME_VALIDATE_UNKNOWN_KEY)
        if account.address.match(host):
            return
        expected = request.signature_for(account.secret_key) if request.signature_for is not None else ""
        if not signature_matches(expected, request.signature):
            raise AclError(f"Check signature failed for accessKey={request.access_key}", FRAME_VALIDATE_SIGNATURE)
        # Message traces are written by every client that enables them.
        if request.resources.get(TRACE_TOPIC) == PUB:
            return
        check_perm(request, account)

    # ---- admin requests ----------------------------------------------------------------------------
    def update_access_config(self, config: Mapping[str, Any]) -> bool:
        """Create or update one account (UPDATE_AND_CREATE_ACL_CONFIG), in the file that defines it, else in
        plain_acl.yml."""
        access_key, secret_key = config.get("accessKey"), config.get("secretKey")
        check_keys(access_key, secret_key)
        check_resource_perms(config.get("topicPerms"))
        check_resource_perms(config.get("groupPerms"))
        path = self.tables.account_file.get(access_key) or self.default_file
        data = self._file_data(path)
        accounts = data.get("accounts")
        if not isinstance(accounts, list):
            accounts = []
        for i, entry in enumerate(accounts):
            if isinstance(entry, Mapping) and str(entry.get("accessKey")) == access_key:
                accounts.pop(i)
                accounts.append(_merge_account(dict(entry), config))
                break
        else:
            accounts.append(_merge_account({}, config))
        PlainAccount.from_config(accounts[-1])  # refuse what the broker could not load back
        data["accounts"] = accounts
        return self._write(path, data)

    def delete_access_config(self, access_key: str | None) -> bool:
        if not access_key:
            return False
        path = self.tables.account_file.get(access_key)
        if path is None:
            return False
        data = self._file_data(path)
        if not data:
            return True
        accounts = data.get("accounts") or []
        kept = [a for a in accounts if not (isinstance(a, Mapping) and str(a.get("accessKey")) == access_key)]
        if len(kept) == len(accounts):
            return False
        data["accounts"] = kept
        return self._write(path, data)

    def update_global_white_addrs(self, addresses: list[str] | None, file_name: str | None) -> bool:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG. Upstream accepts any existing file whose name starts with the home
        folder (``../`` included); we accept only the ACL files this broker loads."""
        path = file_name or self.default_file
        if addresses is None:
            return False
        real = os.path.realpath(path)
        known = {os.path.realpath(p) for p in (*self.acl_files(), self.default_file)}
        if real not in known or not os.path.isfile(real):
            log.warning("global white list update names a file that is not an acl file", file=path)
            return False
        for pattern in addresses:
            address_strategy(pattern)  # refuse what the broker could not load back
        data = self._file_data(real)
        data["globalWhiteRemoteAddresses"] = list(addresses)
        return self._write(real, data)

    def version_info(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """(plain_acl.yml's data version, every file's) for GET_BROKER_CLUSTER_ACL_INFO."""
        return self.default_version.to_json(), {p: v.to_json() for p, v in self.tables.data_versions.items()}

    def all_config(self) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_ACL_CONFIG's body: every file's white list and accounts, read from the files."""
        white: list[str] = []
        configs: list[dict[str, Any]] = []
        seen: set[str] = set()
        for path in self.tables.files:
            try:
                data = read_yaml(path)
            except AclError:
                continue
            if not isinstance(data, Mapping):
                continue
            white.extend(str(a) for a in data.get("globalWhiteRemoteAddresses") or [] if a is not None)
            for entry in data.get("accounts") or []:
                if isinstance(entry, Mapping) and str(entry.get("accessKey")) not in seen:
                    seen.add(str(entry.get("accessKey")))
                    configs.append(account_config_json(entry))
        return {"globalWhiteAddrs": white, "plainAccessConfigs": configs}

    def _file_data(self, path: str) -> dict[str, Any]:
        data = read_yaml(path)
        return dict(data) if isinstance(data, Mapping) else {}

    def _write(self, path: str, data: dict[str, Any]) -> bool:
        version = self.tables.data_versions.get(path) or _data_version(data.get("dataVersion"), self.now_ms)
        version = DataVersion(timestamp=version.timestamp, counter=version.counter)
        version.next_version(self.now_ms)
        data["dataVersion"] = [{"counter": version.counter, "timestamp": version.timestamp}]
        write_yaml(path, data)
        self.load()
        return True


def check_perm(request: AccessRequest, account: PlainAccount) -> None:
    """J ``PlainPermissionManager.checkPerm``."""
    if need_admin(request.code) and not account.admin:
        raise AclError(
            f"Need admin permission for request code={request.code}, but accessKey={account.access_key} is not",
            FRAME_CHECK_ADMIN,
        )
    needed = request.resources
    if not needed:
        return
    owned = account.resource_perms
    if not owned and account.admin:
        return
    for resource, perm in needed.items():
        is_group = is_retry_topic(resource)
        if resource not in owned:
            default = account.default_group_perm if is_group else account.default_topic_perm
            if not check_permission(perm, default):
                raise AclError(
                    f"No default permission for {printable_resource(resource, is_group)}", FRAME_CHECK_DEFAULT
                )
            continue
        if not check_permission(perm, owned[resource]):
            raise AclError(f"No default permission for {printable_resource(resource, is_group)}", FRAME_CHECK_RESOURCE)


def _items(value: Any, path: str) -> Iterable[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise AclError(f"{path}: expected a list, got {type(value).__name__}")
    return value


def _data_version(value: Any, now_ms: Callable[[], int]) -> DataVersion:
    if isinstance(value, list) and value and isinstance(value[0], Mapping):
        try:
            return DataVersion(timestamp=int(value[0].get("timestamp", 0)), counter=int(value[0].get("counter", 0)))
        except (TypeError, ValueError):
            pass
    return DataVersion(timestamp=now_ms())


def _merge_account(existing: dict[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """J ``createAclAccessConfigMap``: the request's non-empty fields over the account's current ones."""
    access_key = config.get("accessKey")
    if not access_key or len(access_key) <= MIN_KEY_LENGTH:
        raise AclError(f"The accessKey={access_key} cannot be null and length should longer than 6")
    existing["accessKey"] = access_key
    secret_key = config.get("secretKey")
    if secret_key:
        if len(secret_key) <= MIN_KEY_LENGTH:
            raise AclError(f"The secretKey={secret_key} value length should longer than 6")
        existing["secretKey"] = secret_key
    if config.get("whiteRemoteAddress") is not None:
        existing["whiteRemoteAddress"] = config["whiteRemoteAddress"]
    existing["admin"] = bool(config.get("admin"))
    for key in ("defaultTopicPerm", "defaultGroupPerm"):
        if config.get(key):
            existing[key] = config[key]
    for key in ("topicPerms", "groupPerms"):
        if config.get(key) is not None:
            existing[key] = list(config[key])
    return {k: existing[k] for k in (*ACCOUNT_KEYS, *existing) if k in existing}
