"""How a client that logged in with its certificate logs in to RabbitMQ.

RabbitMQ's EXTERNAL mechanism takes the user from the certificate presented on
*the AMQP connection*, and the bridge does not hold its clients' private keys.
Two ways round that:

* ``external``: the bridge holds a signing CA that RabbitMQ trusts for client
  certificates and signs, per STOMP user, a short-lived certificate with the
  *same subject* as the client's, then opens amqps:// with EXTERNAL. RabbitMQ
  derives the user exactly as it would from the client's own certificate, so
  its ``ssl_cert_login_from`` must equal the bridge's. Certificates (and their
  SSL contexts) are cached per subject and renewed when 80 % of their life is
  gone; one key pair serves all of them.
* ``credentials``: a TOML file maps the certificate user name to an AMQP
  user and password, for brokers without EXTERNAL.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import ssl
import tempfile
import time
import tomllib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stomp_bridge.core.peer import PeerPolicy
from stomp_bridge.protocol.errors import AccessRefused
from stomp_bridge.swaptacular.profile import SwaptacularProfile
from stomp_bridge.tls import PeerCertificate, build_client_context

# cryptography is imported by the signer, which only certificate login to RabbitMQ builds (its
# x509 module costs about 9 MB of RSS that other bridges never need).
if TYPE_CHECKING:
    from cryptography import x509

    from stomp_bridge.settings.sections import AmqpSettings, CertLoginSettings

CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class AmqpLogin:
    user: str  # also what the bridge logs and checks against loopback_users
    password: str
    context: ssl.SSLContext | None = None  # the TLS context of the amqps:// connection
    external: bool = False


def amqp_client_context(amqp: AmqpSettings) -> ssl.SSLContext | None:
    """The context password logins use on amqps:// (None: aiormq's default)."""
    if not any(u.strip().startswith("amqps://") for u in amqp.amqp_url.split(",")):
        return None
    return build_client_context(None, None, amqp.tls_amqp_ca_file, check_hostname=amqp.tls_amqp_verify_hostname)


class CertificateSigner:
    """Signs short-lived client certificates for RabbitMQ's EXTERNAL mechanism."""

    def __init__(
        self,
        signer_cert_file: str,
        signer_key_file: str,
        *,
        hours: float = 24.0,
        ca_file: str | None = None,
        verify_hostname: bool = True,
        clock=time.time,
    ) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        signer_pem = Path(signer_cert_file).read_bytes()
        self._signer_pem = signer_pem
        self._signer = x509.load_pem_x509_certificate(signer_pem)
        self._signer_key = serialization.load_pem_private_key(Path(signer_key_file).read_bytes(), None)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._key_pem = self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        self._lifetime = hours * 3600
        self._ca_file = ca_file
        self._verify_hostname = verify_hostname
        self._clock = clock
        self._cache: OrderedDict[bytes, tuple[float, ssl.SSLContext]] = OrderedDict()
        self.signed = 0

    def sign(self, subject: x509.Name, now: float) -> bytes:
        """A PEM certificate for ``subject`` valid from 5 minutes ago for the lifetime."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID

        start = dt.datetime.fromtimestamp(now - 300, dt.timezone.utc)
        end = dt.datetime.fromtimestamp(now + self._lifetime, dt.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._signer.subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(self._signer_key, hashes.SHA256())
        )
        self.signed += 1
        return cert.public_bytes(serialization.Encoding.PEM)

    async def context_for(self, subject: x509.Name) -> ssl.SSLContext:
        """The cached context for ``subject``; a miss signs and builds one in a worker
        thread (a few ms, ~25 ms more when the system CA store is loaded), off the loop."""
        key = subject.public_bytes()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(key)
            return cached[1]
        context = await asyncio.get_running_loop().run_in_executor(None, self._context, subject, now)
        self._cache[key] = (now + self._lifetime * 0.8, context)
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return context

    def _context(self, subject: x509.Name, now: float) -> ssl.SSLContext:
        chain = self.sign(subject, now) + self._signer_pem
        context = build_client_context(None, None, self._ca_file, check_hostname=self._verify_hostname)
        _load_chain(context, chain + self._key_pem)
        return context


def _load_chain(context: ssl.SSLContext, pem: bytes) -> None:
    """``load_cert_chain`` from memory: ssl reads files only, so an anonymous memory file
    (Linux) keeps the key off disk; elsewhere a private temporary file, removed at once."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("stomp-bridge-amqp-cert")
        try:
            view = memoryview(pem)
            while view:
                view = view[os.write(fd, view):]
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        context.load_cert_chain(path)
    finally:
        os.unlink(path)


class CertLogin:
    """Resolves a verified client certificate to its RabbitMQ login."""

    def __init__(self, cert_login: CertLoginSettings, amqp: AmqpSettings) -> None:
        """``settings.cert_login``, and ``settings.amqp`` for how the signed certificates'
        connections check RabbitMQ's own certificate."""
        self.login_from = cert_login.ssl_cert_login_from
        self.signer: CertificateSigner | None = None
        self._credentials_file = cert_login.tls_amqp_credentials_file
        self._credentials: dict[str, tuple[str, str]] = {}
        if cert_login.tls_amqp_auth == "external":
            assert cert_login.tls_amqp_signer_cert_file and cert_login.tls_amqp_signer_key_file
            self.signer = CertificateSigner(
                cert_login.tls_amqp_signer_cert_file,
                cert_login.tls_amqp_signer_key_file,
                hours=cert_login.tls_amqp_cert_hours,
                ca_file=amqp.tls_amqp_ca_file,
                verify_hostname=amqp.tls_amqp_verify_hostname,
            )
        else:
            self.reload()

    def reload(self) -> None:
        """Read the credentials file again (SIGHUP); a broken file raises and changes nothing."""
        if self._credentials_file is None:
            return
        self._credentials = load_credentials(Path(self._credentials_file).read_text("utf-8"))

    async def login(self, cert: PeerCertificate) -> AmqpLogin:
        name = cert.login_name(self.login_from)
        if name is None:
            raise AccessRefused(
                "Bad CONNECT",
                "Your certificate has no common name; ssl_cert_login_from=common_name needs one.",
            )
        if self.signer is not None:
            return AmqpLogin(name, "", await self.signer.context_for(cert.subject), external=True)
        found = self._credentials.get(name)
        if found is None:
            raise AccessRefused(
                "Bad CONNECT",
                f"Access refused for user '{name}'",
                private="no entry for this certificate in tls_amqp_credentials_file",
            )
        return AmqpLogin(found[0], found[1], None)


def load_credentials(text: str) -> dict[str, tuple[str, str]]:
    """``["CN=alice,O=Example"] user = "alice" password = "…"`` → name → (user, password).

    ``user`` defaults to the certificate name itself.
    """
    data = tomllib.loads(text)
    out = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("password"), str):
            raise ValueError(f"credentials entry {name!r} needs a password string")
        out[name] = (str(entry.get("user", name)), entry["password"])
    return out


@dataclass(frozen=True, slots=True)
class ConnectSecurity:
    """What a TLS listener adds to CONNECT: certificate login and the peer profile.

    One per listener, shared by its sessions; ``resolve`` is the whole of the
    session's certificate handling.
    """

    cert_login: CertLogin | None = None
    profile: SwaptacularProfile | None = None
    amqp_context: ssl.SSLContext | None = None  # password logins on amqps://

    async def resolve(
        self, cert: PeerCertificate | None, headers: dict[str, str], version: str
    ) -> tuple[AmqpLogin | None, PeerPolicy | None]:
        policy = self.profile.bind(cert, headers, version) if self.profile is not None else None
        if cert is None or self.cert_login is None:
            return None, policy
        if "login" in headers or "passcode" in headers:
            # The plugin's rule for ssl_cert_login: the certificate is the credential.
            raise AccessRefused(
                "Bad CONNECT",
                "You presented a client certificate, which logs you in (ssl_cert_login): "
                "leave out login and passcode\n",
            )
        login = await self.cert_login.login(cert)
        if login.context is None:  # a password login: the listener's amqps:// context
            login = AmqpLogin(login.user, login.password, self.amqp_context)
        return login, policy
