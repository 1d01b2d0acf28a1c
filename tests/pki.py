"""Throwaway certificate authorities and certificates for the TLS tests, made at run time."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_NAMES = {
    "C": NameOID.COUNTRY_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "CN": NameOID.COMMON_NAME,
    "serialNumber": NameOID.SERIAL_NUMBER,
}


def name(*pairs: tuple[str, str]) -> x509.Name:
    """``name(("O", "Example"), ("CN", "alice"))``: RDNs in that order (first = most general)."""
    return x509.Name([x509.NameAttribute(_NAMES[k], v) for k, v in pairs])


@dataclass
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    chain: list[x509.Certificate] = field(default_factory=list)  # issuers to send along

    @property
    def cert_pem(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [self.cert, *self.chain])

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @property
    def cert_der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    @property
    def key_der(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def write(self, directory: Path, stem: str) -> tuple[str, str]:
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.write_bytes(self.key_pem)
        return str(cert_path), str(key_path)


def _build(subject: x509.Name, issuer: Issued | None, *, ca: bool, days: float = 2,
           server: bool = False, client: bool = False, sans: list[str] = ()) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(min(now - dt.timedelta(minutes=5), now + dt.timedelta(days=days - 1)))
        .not_valid_after(now + dt.timedelta(days=days))  # days < 0: already expired
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        general = []
        for san in sans:
            try:
                general.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                general.append(x509.DNSName(san))
        builder = builder.add_extension(x509.SubjectAlternativeName(general), critical=False)
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False
        )
    signing_key = issuer.key if issuer else key
    return Issued(builder.sign(signing_key, hashes.SHA256()), key)


def make_ca(common_name: str) -> Issued:
    return _build(name(("O", "stomp-bridge tests"), ("CN", common_name)), None, ca=True, days=30)


def server_cert(ca: Issued, common_name: str = "localhost", sans: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Issued:
    return _build(name(("O", "stomp-bridge tests"), ("CN", common_name)), ca, ca=False, server=True,
                  client=True, sans=list(sans))


def client_cert(ca: Issued, subject: x509.Name, days: float = 2) -> Issued:
    return _build(subject, ca, ca=False, client=True, days=days)
