"""TLS for the STOMP listeners: the server context, certificate reload, and who the peer is.

One :class:`ServerTLS` per bridge owns the listener's ``ssl.SSLContext``. Every
listener (TCP+TLS, and a WebSocket listener for wss) is given the same
``.context``; :meth:`ServerTLS.reload` builds a fresh context from the files and
an SNI callback hands each *new* handshake to the freshest one, so rotating
cert-manager secrets needs no restart and open connections keep their session.
A file that fails to load leaves the last good context in place.

A listener passes ``peer_certificate(transport.get_extra_info("ssl_object"))``
and the bridge's ``tls_security`` (certificate login, Swaptacular profile) to
its Session; that is all a wss:// listener needs to do the same.

Peer identity: :func:`rabbit_dn` formats a certificate subject exactly as
RabbitMQ's ``rabbit_cert_info:subject/1`` does (the user name of RabbitMQ's
``ssl_cert_login_from = distinguished_name``), :func:`common_name` as its
``common_name`` mode. Both are pure functions of the certificate.
"""

from __future__ import annotations

import functools
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# cryptography is imported where a certificate is read, not here: its x509 module costs about
# 9 MB of RSS, which a bridge without TLS listeners or certificate login never needs.
if TYPE_CHECKING:
    from cryptography import x509

    from stomp_bridge.settings.sections import TlsSettings

log = logging.getLogger(__name__)

TLS_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}

@functools.cache
def _rabbit_names() -> dict[str, str]:
    """rabbit_cert_info:format_rdn/1: the short names RabbitMQ uses; others are dotted OIDs."""
    from cryptography.x509.oid import NameOID

    return {
        NameOID.SURNAME.dotted_string: "SN",
        NameOID.GIVEN_NAME.dotted_string: "GIVENNAME",
        "2.5.4.43": "INITIALS",
        NameOID.GENERATION_QUALIFIER.dotted_string: "GENERATIONQUALIFIER",
        NameOID.COMMON_NAME.dotted_string: "CN",
        NameOID.LOCALITY_NAME.dotted_string: "L",
        NameOID.STATE_OR_PROVINCE_NAME.dotted_string: "ST",
        NameOID.ORGANIZATION_NAME.dotted_string: "O",
        NameOID.ORGANIZATIONAL_UNIT_NAME.dotted_string: "OU",
        NameOID.TITLE.dotted_string: "TITLE",
        NameOID.COUNTRY_NAME.dotted_string: "C",
        NameOID.SERIAL_NUMBER.dotted_string: "SERIALNUMBER",
        NameOID.PSEUDONYM.dotted_string: "PSEUDONYM",
        NameOID.DOMAIN_COMPONENT.dotted_string: "DC",
        NameOID.EMAIL_ADDRESS.dotted_string: "EMAILADDRESS",
        NameOID.STREET_ADDRESS.dotted_string: "STREET",
        NameOID.USER_ID.dotted_string: "UID",
    }


@functools.cache
def _attributes() -> dict[str, x509.ObjectIdentifier]:
    """Attribute names accepted where a setting names one (swpt_peer_id_from)."""
    from cryptography.x509.oid import NameOID

    return {
        "serialNumber": NameOID.SERIAL_NUMBER,
        "commonName": NameOID.COMMON_NAME,
        "CN": NameOID.COMMON_NAME,
        "organizationName": NameOID.ORGANIZATION_NAME,
        "O": NameOID.ORGANIZATION_NAME,
        "organizationalUnitName": NameOID.ORGANIZATIONAL_UNIT_NAME,
        "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
        "UID": NameOID.USER_ID,
    }


def _escape_rdn_value(value: str) -> str:
    """rabbit_cert_info:escape_rdn_value/1, byte for byte (it works on UTF-8 bytes)."""
    data = value.encode("utf-8")
    out = []
    last = len(data) - 1
    for i, byte in enumerate(data):
        ch = chr(byte)
        if i == 0 and ch in " #":
            out.append("\\" + ch)
        elif i == last and i > 0 and ch == " ":
            out.append("\\ ")
        elif ch in '"+,;<>\\':
            out.append("\\" + ch)
        elif byte < 32 or byte >= 126:
            out.append(f"\\{byte:02X}")
        else:
            out.append(ch)
    return "".join(out)


def rabbit_dn(name: x509.Name) -> str:
    """The subject as RabbitMQ's EXTERNAL mechanism names the user (RDNs last to first)."""
    parts = []
    for rdn in reversed(list(name.rdns)):
        items = []
        for attr in rdn:
            oid = attr.oid.dotted_string
            label = _rabbit_names().get(oid, oid)
            value = attr.value if isinstance(attr.value, str) else attr.value.hex()
            items.append(f"{label}={_escape_rdn_value(value)}")
        parts.append("+".join(items))
    return ",".join(parts)


def common_name(name: x509.Name) -> str | None:
    """RabbitMQ's common_name mode: every CN in subject order, joined with ','."""
    from cryptography.x509.oid import NameOID

    values = [str(a.value) for a in name.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return ",".join(values) if values else None


@dataclass(frozen=True, slots=True)
class PeerCertificate:
    """The verified client certificate of one TLS connection."""

    der: bytes
    subject: x509.Name

    @classmethod
    def from_der(cls, der: bytes) -> PeerCertificate:
        from cryptography import x509

        return cls(der, x509.load_der_x509_certificate(der).subject)

    @property
    def dn(self) -> str:
        return rabbit_dn(self.subject)

    def login_name(self, login_from: str) -> str | None:
        """The user name for ``ssl_cert_login_from`` (None: the certificate has no CN)."""
        if login_from == "common_name":
            return common_name(self.subject)
        return self.dn

    def attribute(self, name: str) -> str | None:
        """The first subject attribute called ``name`` (e.g. serialNumber), or None."""
        from cryptography import x509

        oid = _attributes().get(name) or x509.ObjectIdentifier(name)
        found = self.subject.get_attributes_for_oid(oid)
        return str(found[0].value) if found else None


def peer_certificate(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> PeerCertificate | None:
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return PeerCertificate.from_der(der) if der else None


@dataclass(frozen=True, slots=True)
class ServerTLSConfig:
    """A listener's TLS files and checks, like RabbitMQ's ssl_options (certfile, keyfile,
    cacertfile, verify, fail_if_no_peer_cert, versions); ``build`` reads the files."""

    cert_file: str
    key_file: str
    ca_file: str | None = None
    min_version: str = "1.2"
    verify_peer: bool = False
    fail_if_no_peer_cert: bool = False

    @classmethod
    def from_settings(cls, tls: TlsSettings) -> ServerTLSConfig:
        """From the settings' TLS section (``settings.tls``; rules.py made sure the files are set)."""
        return cls(
            tls.tls_cert_file,
            tls.tls_key_file,
            tls.tls_ca_file,
            min_version=tls.tls_min_version,
            verify_peer=tls.tls_verify_peer,
            fail_if_no_peer_cert=tls.tls_fail_if_no_peer_cert,
        )

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(path for path in (self.cert_file, self.key_file, self.ca_file) if path)

    def build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = TLS_VERSIONS[self.min_version]
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.ca_file:
            context.load_verify_locations(cafile=self.ca_file)
        if self.verify_peer:
            context.verify_mode = ssl.CERT_REQUIRED if self.fail_if_no_peer_cert else ssl.CERT_OPTIONAL
        else:
            context.verify_mode = ssl.CERT_NONE
        context.options |= ssl.OP_NO_COMPRESSION
        return context


def build_client_context(
    cert_file: str | None,
    key_file: str | None,
    ca_file: str | None,
    *,
    min_version: str = "1.2",
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client context: the server must present a certificate chain from ``ca_file``
    (the system store when None); ``cert_file`` is presented when the server asks."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    context.minimum_version = TLS_VERSIONS[min_version]
    context.check_hostname = check_hostname
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context


class ServerTLS:
    """The listeners' TLS context and its reload.

    ``context`` never changes identity (asyncio servers keep the object they were
    started with); its SNI callback moves each handshake to ``current``, the
    context built from the files at the last successful (re)load.
    """

    def __init__(self, config: ServerTLSConfig) -> None:
        self.config = config
        self.current = config.build()
        self.context = config.build()
        self.context.sni_callback = self._pick_context
        # Called with a HANDSHAKE_FAILURES label and the error when a client's handshake fails.
        self.on_handshake_failure: Callable[[str, ssl.SSLError], None] | None = None
        self.context.sslobject_class = _watched_ssl_object(self)
        self._stamp = self._file_stamp()
        self.reloads = 0

    def _pick_context(self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        if self.current is not context:
            ssl_object.context = self.current
        return None

    def _file_stamp(self) -> tuple:
        stamp = []
        for path in self.config.files:
            try:
                st = os.stat(path)  # follows symlinks: a Kubernetes secret swaps ..data
                stamp.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                stamp.append(None)
        return tuple(stamp)

    def reload(self) -> bool:
        """Load the files again; True when the new context is in use. A broken file
        (missing, key not matching the certificate …) keeps the previous one."""
        stamp = self._file_stamp()
        try:
            fresh = self.config.build()
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.error(
                "TLS reload failed; the previous certificate stays in use",
                extra={"cert_file": self.config.cert_file, "error": str(exc)},
            )
            return False
        self.current = fresh
        self._stamp = stamp
        self.reloads += 1
        cert_file = self.config.cert_file
        log.info("TLS certificate reloaded", extra={"cert_file": cert_file, **certificate_summary(cert_file)})
        return True

    def reload_if_changed(self) -> bool:
        """The file watch: reload when a file's mtime, size or inode moved."""
        if self._file_stamp() == self._stamp:
            return False
        return self.reload()


def certificate_summary(cert_file: str) -> dict[str, str]:
    """Subject and expiry of the first certificate in a PEM file, for the logs."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(Path(cert_file).read_bytes())
    except (OSError, ValueError):
        return {}
    return {"subject": rabbit_dn(cert.subject), "expires": cert.not_valid_after_utc.isoformat()}


# -- failed handshakes -----------------------------------------------------------------------

# Why a handshake failed, as a metric label: a fixed set, whatever OpenSSL says.
HANDSHAKE_FAILURES = ("version", "no_certificate", "certificate", "closed", "protocol")


def handshake_failure(exc: ssl.SSLError) -> str:
    """The ``HANDSHAKE_FAILURES`` label of an error from a server handshake."""
    if isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)):
        return "closed"
    reason = (exc.reason or "").upper()
    if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST"):
        return "protocol"  # not TLS at all: e.g. a plain STOMP client on the TLS port
    if "VERSION" in reason or ("PROTOCOL" in reason and "UNSUPPORTED" in reason):
        return "version"
    if "PEER_DID_NOT_RETURN_A_CERTIFICATE" in reason or "CERTIFICATE_REQUIRED" in reason:
        return "no_certificate"
    if "CERTIFICATE" in reason or "VERIFY" in reason or "UNKNOWN_CA" in reason:
        return "certificate"
    return "protocol"


def _watched_ssl_object(owner: ServerTLS) -> type[ssl.SSLObject]:
    """An ``SSLObject`` class for the listener context that reports failed handshakes.

    asyncio and uvloop run a listener's handshake inside the transport and, for an
    ``SSLError``, only log it at DEBUG: the server never hears of it. Both drive the
    handshake through the context's ``sslobject_class``, so this is where a failure can be
    seen. Timeouts and clients that vanish without a TLS alert raise nothing here.
    """

    class WatchedSSLObject(ssl.SSLObject):
        def do_handshake(self) -> None:
            try:
                super().do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                raise
            except ssl.SSLError as exc:
                callback = owner.on_handshake_failure
                if callback is not None:
                    callback(handshake_failure(exc), exc)
                raise

    return WatchedSSLObject
