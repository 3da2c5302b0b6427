"""What a broker's start imports (issue 15: start <= 0.5 s): libraries needed only by an optional feature are
imported when that feature is first used, not by every ``mqbroker``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from broker.acl.errors import AclError
from broker.acl.permission_manager import read_yaml, write_yaml

ROOT = Path(__file__).resolve().parents[2]
# what ``mqbroker`` with the embedded defaults imports before its ports open (the gRPC endpoint is on by default)
BOOT = "import sys, broker.main, broker.controller, proxy.server; print(' '.join(sorted(sys.modules)))"


def boot_modules() -> set[str]:
    out = subprocess.run([sys.executable, "-c", BOOT], cwd=ROOT, check=True, capture_output=True, text=True, timeout=60)
    return set(out.stdout.split())


def test_optional_libraries_are_not_imported_at_boot():
    modules = boot_modules()
    assert "broker.controller" in modules and "proxy.server" in modules
    # yaml: only the ACL files (aclEnable=false by default); cryptography: only a self-signed certificate
    # made on a first start (proxy.tls); the SQL92 parser: only a SQL92 subscription
    assert "yaml" not in modules
    assert "broker.filter_sql" not in modules
    assert not any(m == "cryptography" or m.startswith("cryptography.") for m in modules)
    # ACL 1.0 (aclEnable=false by default): the accounts, permissions and validator, for both endpoints; only
    # its small error module (the admin processor names AclError) is left
    assert {m for m in modules if m.startswith("broker.acl.")} == {"broker.acl.errors"}
    assert "proxy.auth" not in modules


def test_acl_files_still_read_and_written(tmp_path):
    path = str(tmp_path / "plain_acl.yml")
    write_yaml(path, {"accounts": [{"accessKey": "rocketmq2", "secretKey": "12345678"}]})
    assert read_yaml(path) == {"accounts": [{"accessKey": "rocketmq2", "secretKey": "12345678"}]}
    (tmp_path / "bad.yml").write_text("a: [", encoding="utf-8")
    with pytest.raises(AclError, match="not valid YAML"):
        read_yaml(str(tmp_path / "bad.yml"))
