"""Fixtures for the TLS tests: a test PKI, a TLS raw STOMP client, and an amqps:// RabbitMQ.

Test modules import the fixtures they use from here.
"""

from __future__ import annotations

import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509

from testkit.ports import free_port
from tests import pki, rabbit_tls
from tests.integration.rawstomp import RawStomp


@dataclass
class Pki:
    dir: Path
    ca: pki.Issued  # signs the bridge's server certificate and the clients' certificates
    ca_file: str
    server_cert: str
    server_key: str
    signer: pki.Issued  # the CA RabbitMQ trusts for client certificates (EXTERNAL)
    signer_cert: str
    signer_key: str
    _count: int = 0

    def client(self, *pairs: tuple[str, str], ca: pki.Issued | None = None) -> tuple[str, str]:
        """Files of a client certificate with this subject (issued by ``ca``, default the test CA)."""
        self._count += 1
        return pki.client_cert(ca or self.ca, pki.name(*pairs)).write(self.dir, f"client-{self._count}")


@pytest.fixture(scope="session")
def test_pki(tmp_path_factory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = pki.make_ca("stomp-bridge test CA")
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca.cert_pem)
    server_cert, server_key = pki.server_cert(ca, "bridge").write(directory, "bridge")
    signer = pki.make_ca("stomp-bridge test AMQP signer")
    signer_cert, signer_key = signer.write(directory, "signer")
    return Pki(directory, ca, str(ca_file), server_cert, server_key, signer, signer_cert, signer_key)


@pytest.fixture
def tls_settings(test_pki) -> dict[str, object]:
    """Settings of a TLS-only bridge with the test PKI's server certificate."""
    return {
        "port": None,
        "tls_port": 0,
        "tls_cert_file": test_pki.server_cert,
        "tls_key_file": test_pki.server_key,
        "tls_ca_file": test_pki.ca_file,
    }


class TlsStomp(RawStomp):
    def __init__(self, address: tuple[str, int], context: ssl.SSLContext, timeout: float = 5.0) -> None:
        super().__init__(address, timeout=timeout)
        self.sock = context.wrap_socket(self.sock, server_hostname=None)


def client_context(
    test_pki: Pki,
    cert: tuple[str, str] | None = None,
    *,
    min_version: ssl.TLSVersion | None = None,
    max_version: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    """What Swaptacular asks of clients: verify the server's chain, no hostname check."""
    context = ssl.create_default_context(cafile=test_pki.ca_file)
    context.check_hostname = False
    if min_version is not None:
        context.minimum_version = min_version
    if max_version is not None:
        context.maximum_version = max_version
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


@pytest.fixture
def tls_dial(test_pki):
    """``tls_dial(bridge, cert=(crt, key), max_version=…)``: a TlsStomp; closed at teardown."""
    opened: list[RawStomp] = []

    def make(bridge, cert=None, timeout: float = 5.0, **versions) -> TlsStomp:
        conn = TlsStomp(("127.0.0.1", bridge.tls_port), client_context(test_pki, cert, **versions), timeout)
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.close()


def refused_handshake(make) -> BaseException:
    """The server refuses the TLS session: in TLS 1.3 the client may learn it only on its
    first read, after its own side of the handshake finished. Returns the error."""
    try:
        conn = make()
    except (ssl.SSLError, ConnectionError) as exc:
        return exc
    try:
        conn.sock.settimeout(5)
        data = conn.sock.recv(1)
    except (ssl.SSLError, ConnectionError) as exc:
        return exc
    assert data == b"", f"the server accepted the TLS session and sent {data!r}"
    return ConnectionError("closed")


@dataclass
class Amqps:
    url: str  # amqps://guest:guest@127.0.0.1:<port>/
    port: int


@pytest.fixture(scope="session")
def amqps(broker, test_pki) -> Amqps:
    """A TLS listener on the test RabbitMQ for this session, and EXTERNAL enabled.

    RabbitMQ's server certificate comes from the test CA; client certificates are
    verified against the signer CA (the one the bridge signs EXTERNAL users with).
    """
    host = urllib.parse.urlsplit(broker.amqp_url).hostname
    if host not in ("127.0.0.1", "localhost"):
        pytest.fail(
            "The amqps:// tests add a TLS listener to a local RabbitMQ with rabbitmqctl; "
            f"STOMP_BRIDGE_TEST_AMQP_URL points at {host}. Deselect them with -m 'not amqps'.",
            pytrace=False,
        )
    server = pki.server_cert(test_pki.ca, "rabbitmq")
    port = free_port()
    rabbit_tls.start_tls_listener(port, [test_pki.signer.cert_der], server.cert_der, server.key_der)
    try:
        with rabbit_tls.external_enabled():
            yield Amqps(f"amqps://guest:guest@127.0.0.1:{port}/", port)
    finally:
        rabbit_tls.stop_tls_listener(port)


def subject_dn(cert_file: str) -> str:
    from stomp_bridge.tls import rabbit_dn

    return rabbit_dn(x509.load_pem_x509_certificate(Path(cert_file).read_bytes()).subject)
