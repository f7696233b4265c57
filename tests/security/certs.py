"""A test CA made by the tests: CA, server and client certificates (``cryptography``).

``make_pki(dir)`` writes ``ca.pem``, ``server.pem``/``server.key`` (for 127.0.0.1 and
localhost), ``expired.pem``/``expired.key`` (valid until yesterday), ``client.pem``/
``client.key``, and ``other-ca.pem`` (a CA that signed none of them).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    dir: Path

    def __getattr__(self, name: str) -> str:
        stem, _, ext = name.rpartition("_")  # other_ca_pem -> other-ca.pem
        return str(self.dir / f"{stem.replace('_', '-')}.{ext}")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=2))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca: x509.Certificate,
    cn: str,
    valid_days: tuple[int, int],
    server: bool,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + dt.timedelta(days=valid_days[0]))
        .not_valid_after(now + dt.timedelta(days=valid_days[1]))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return key, builder.sign(ca_key, hashes.SHA256())


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    ca_key, ca = _ca("segmentstore test CA")
    _, other = _ca("some other CA")
    pem = serialization.Encoding.PEM
    (d / "ca.pem").write_bytes(ca.public_bytes(pem))
    (d / "other-ca.pem").write_bytes(other.public_bytes(pem))
    for stem, cn, days, server in (
        ("server", "127.0.0.1", (-1, 1), True),
        ("expired", "127.0.0.1", (-2, -1), True),
        ("client", "test client", (-1, 1), False),
    ):
        key, cert = _leaf(ca_key, ca, cn, days, server)
        (d / f"{stem}.pem").write_bytes(cert.public_bytes(pem))
        _write_key(key, d / f"{stem}.key")
    return Pki(d)
