"""The self-signed gRPC certificate is made once per store and reused by later boots while it still fits."""

from __future__ import annotations

import json
import sys
import time

from proxy import tls

HOSTS = ["localhost", "127.0.0.1", "127.0.0.1"]


def test_a_second_boot_reuses_the_generated_pair(tmp_path, monkeypatch):
    first = tls.load_or_generate("", "", str(tmp_path), HOSTS)
    made = []
    monkeypatch.setattr(tls, "self_signed", lambda *a, **k: made.append(a) or (b"x", b"y"))
    second = tls.load_or_generate("", "", str(tmp_path), HOSTS)
    assert made == []
    assert (second.cert_pem, second.key_pem, second.cert_path) == (first.cert_pem, first.key_pem, first.cert_path)
    assert (tmp_path / "grpc-tls" / "key.pem").stat().st_mode & 0o077 == 0


def test_other_hosts_a_near_expiry_or_a_missing_record_make_a_new_pair(tmp_path):
    first = tls.load_or_generate("", "", str(tmp_path), HOSTS)
    other = tls.load_or_generate("", "", str(tmp_path), ["localhost", "10.0.0.7"])
    assert other.cert_pem != first.cert_pem
    record = tmp_path / "grpc-tls" / "hosts.json"
    meta = json.loads(record.read_text())
    assert meta["hosts"] == ["localhost", "10.0.0.7"]
    record.write_text(json.dumps({**meta, "notAfter": int(time.time()) + 3600}))  # expires within a day
    renewed = tls.load_or_generate("", "", str(tmp_path), ["localhost", "10.0.0.7"])
    assert renewed.cert_pem != other.cert_pem
    record.unlink()  # a pair from before the record existed, or a boot that died while writing
    again = tls.load_or_generate("", "", str(tmp_path), ["localhost", "10.0.0.7"])
    assert again.cert_pem != renewed.cert_pem
    (tmp_path / "grpc-tls" / "cert.pem").write_bytes(b"garbage")
    assert tls.load_or_generate("", "", str(tmp_path), ["localhost", "10.0.0.7"]).cert_pem != b"garbage"


def test_reuse_does_not_import_cryptography(tmp_path):
    import subprocess

    tls.load_or_generate("", "", str(tmp_path), HOSTS)
    code = (
        "import sys; from proxy import tls; "
        f"tls.load_or_generate('', '', {str(tmp_path)!r}, {HOSTS!r}); "
        "print('cryptography' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False", out.stderr
