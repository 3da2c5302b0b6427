"""TLS material for the gRPC endpoint: the configured certificate and key, or a self-signed pair made at boot.

5.x clients connect with TLS unless told otherwise (the Java client by default; the Python client with
``tls_enable=True``) and, like upstream's proxy in its test mode, we can serve them without an operator
issuing a certificate. The generated pair is written under the store directory so that a client that
verifies the server (gRPC's default) can be pointed at it, and reused by the next boot while it names the same
hosts and has more than a day left (``hosts.json`` says which hosts and until when): a restart keeps the
certificate clients were pointed at, and skips importing ``cryptography`` and making a key (issue 15: start fast).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

SELF_SIGNED_DIR = "grpc-tls"
VALIDITY_DAYS = 365
RENEW_BEFORE_S = 24 * 3600


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    cert_pem: bytes
    key_pem: bytes
    cert_path: Path


def load_or_generate(cert_path: str, key_path: str, store_root: str, hosts: list[str]) -> TlsMaterial:
    """The configured pair when both paths are set, else the self-signed one for ``hosts`` a previous boot
    left in ``<store_root>/grpc-tls``, else a fresh one."""
    if cert_path or key_path:
        if not (cert_path and key_path):
            raise ValueError("grpcTlsCertPath and grpcTlsKeyPath must be set together")
        return TlsMaterial(Path(cert_path).read_bytes(), Path(key_path).read_bytes(), Path(cert_path))
    out = Path(store_root) / SELF_SIGNED_DIR
    kept = _kept(out, hosts)
    if kept is not None:
        return kept
    cert_pem, key_pem = self_signed(hosts, VALIDITY_DAYS)
    out.mkdir(parents=True, exist_ok=True)
    (out / "hosts.json").unlink(missing_ok=True)
    (out / "cert.pem").write_bytes(cert_pem)
    key_file = out / "key.pem"
    key_file.touch(mode=0o600)
    key_file.write_bytes(key_pem)
    # written last: a boot that died half-way leaves no hosts.json, and the next one makes a fresh pair
    meta = {"hosts": list(dict.fromkeys(hosts)), "notAfter": int(time.time()) + VALIDITY_DAYS * 86400}
    (out / "hosts.json").write_text(json.dumps(meta), encoding="utf-8")
    log.info("generated a self-signed certificate for the gRPC endpoint", cert=str(out / "cert.pem"), hosts=hosts)
    return TlsMaterial(cert_pem, key_pem, out / "cert.pem")


def _kept(out: Path, hosts: list[str]) -> TlsMaterial | None:
    """The pair a previous boot generated in ``out``, when it names exactly ``hosts`` and is not about to
    expire; None (make a new one) when anything is missing, unreadable or different."""
    try:
        meta = json.loads((out / "hosts.json").read_text(encoding="utf-8"))
        cert_pem, key_pem = (out / "cert.pem").read_bytes(), (out / "key.pem").read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("hosts") != list(dict.fromkeys(hosts)):
        return None
    not_after = meta.get("notAfter")
    if not isinstance(not_after, int) or not_after - time.time() < RENEW_BEFORE_S:
        return None
    if b"-----BEGIN CERTIFICATE-----" not in cert_pem or b"PRIVATE KEY-----" not in key_pem:
        return None
    return TlsMaterial(cert_pem, key_pem, out / "cert.pem")


def self_signed(hosts: list[str], days: int = 365) -> tuple[bytes, bytes]:
    """An EC P-256 key (fast to make at boot) and a certificate naming every host as a DNS or IP SAN."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mini-rocketmq")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
